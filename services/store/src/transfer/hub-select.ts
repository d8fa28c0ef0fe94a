// Which files of a hub repo a pull fetches: only what serving needs. A `*-GGUF` repo holds many
// quantizations of one model (often 10+, many GB); a pull takes one of them (its split parts
// together), one multimodal projector when the repo has any, and the small metadata files, never
// the other quantizations or other weight formats. Pure: the store host and the direct hub
// fallback select the same way.
import { SPLIT_GGUF } from "@ic/protocol";
import type { HubFile } from "./hub.ts";

/** One quantization of the model: its label (the quant tag, or the file's stem when untagged). */
export interface QuantVariant {
  readonly label: string;
  /** Its GGUF files (split parts in order). */
  readonly files: readonly string[];
  readonly bytes: number;
}

export type HubSelection =
  | {
      readonly ok: true;
      readonly files: HubFile[];
      /**
       * The chosen variant's quant tag (an untagged one's stem where the repo has several); null
       * when there was nothing to choose: no GGUF weights (every file is taken), or one untagged.
       */
      readonly quant: string | null;
      /** The GGUF the engine loads (the first part of a split), null without GGUF weights. */
      readonly servedFile: string | null;
      readonly variants: readonly QuantVariant[];
    }
  | { readonly ok: false; readonly message: string; readonly variants: readonly QuantVariant[] };

export interface SelectAsk {
  /** A quant tag, matched case-insensitively (Q4_K_M, q8_0, F16...). */
  readonly quant?: string | undefined;
  /** A file the chosen variant must contain (the registered model's served file). */
  readonly file?: string | undefined;
}

/** The variant taken when none is asked for and the repo has several. */
export const PREFERRED_QUANT = "Q4_K_M";

/** Weight formats: never fetched as metadata. */
const WEIGHT_EXT =
  /\.(gguf|safetensors|bin|pt|pth|ckpt|onnx|h5|msgpack|npz|tflite|ot|pb|mlmodel|nemo|llamafile)$/i;

/**
 * A quant tag inside a file or folder name: Q4_K_M, Q8_0, IQ2_XXS, UD-Q4_K_XL, F16, BF16, F32,
 * TQ1_0, MXFP4... Delimited by `-`, `_`, `.` or the ends of the name.
 */
const QUANT_TAG =
  /(?:^|[-_.])((?:UD-)?(?:I?Q[1-8](?:_[A-Z0-9]+)*|TQ[12]_0|MXFP4(?:_MOE)?|BF16|F16|F32|FP16|FP8))(?=[-_.]|$)/i;

const base = (path: string) => path.slice(path.lastIndexOf("/") + 1);

/** The quant tag a GGUF's name (or, for `Q4_K_M/part-00001-of-00002.gguf` layouts, folder) carries. */
export function quantOf(path: string): string | null {
  const parts = path.split("/");
  for (let i = parts.length - 1; i >= 0; i--) {
    const name = parts[i]!.replace(SPLIT_GGUF, "$1").replace(/\.gguf$/i, "");
    const m = QUANT_TAG.exec(name);
    if (m) return m[1]!.toUpperCase();
  }
  return null;
}

/** A variant's label: its quant tag, or the file's stem (split suffix dropped) when untagged. */
const labelOf = (path: string) =>
  quantOf(path) ??
  base(path)
    .replace(SPLIT_GGUF, "$1")
    .replace(/\.gguf$/i, "");

const isGguf = (path: string) => /\.gguf$/i.test(path);
const isProjector = (path: string) => /mmproj/i.test(base(path));

/** The repo's GGUF weights grouped by quantization, smallest first. */
export function quantVariants(files: readonly HubFile[]): QuantVariant[] {
  const groups = new Map<string, HubFile[]>();
  for (const f of files) {
    if (!isGguf(f.path) || isProjector(f.path)) continue;
    const key = labelOf(f.path).toLowerCase();
    groups.set(key, [...(groups.get(key) ?? []), f]);
  }
  return [...groups.values()]
    .map((fs) => {
      const sorted = [...fs].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
      return {
        label: labelOf(sorted[0]!.path),
        files: sorted.map((f) => f.path),
        bytes: sorted.reduce((s, f) => s + f.bytes, 0),
      };
    })
    .sort((a, b) => a.bytes - b.bytes || (a.label < b.label ? -1 : 1));
}

/** The projector to take: the one matching the chosen precision, else F16, else the smallest. */
function pickProjector(files: readonly HubFile[], quant: string): HubFile | undefined {
  const projectors = files
    .filter((f) => isGguf(f.path) && isProjector(f.path))
    .sort((a, b) => a.bytes - b.bytes);
  return (
    projectors.find((f) => quantOf(f.path) === quant) ??
    projectors.find((f) => quantOf(f.path) === "F16") ??
    projectors[0]
  );
}

/** The variant's file the engine loads: the first part of a split, else its only (or largest) file. */
function servedOf(v: QuantVariant, files: readonly HubFile[]): string {
  const first = v.files.find((p) => SPLIT_GGUF.exec(p)?.[2] === "00001");
  if (first) return first;
  const bytes = new Map(files.map((f) => [f.path, f.bytes]));
  return [...v.files].sort((a, b) => (bytes.get(b) ?? 0) - (bytes.get(a) ?? 0))[0]!;
}

export function selectHubFiles(files: readonly HubFile[], ask: SelectAsk = {}): HubSelection {
  const variants = quantVariants(files);
  const labels = () => variants.map((v) => v.label).join(", ");
  if (variants.length === 0) {
    if (ask.quant !== undefined)
      return {
        ok: false,
        message: `the repo has no GGUF weights, so there is no quantization to choose (asked for ${ask.quant})`,
        variants,
      };
    return { ok: true, files: [...files], quant: null, servedFile: null, variants };
  }
  let chosen: QuantVariant | undefined;
  if (ask.quant !== undefined) {
    const want = ask.quant.toLowerCase();
    chosen = variants.find((v) => v.label.toLowerCase() === want);
    if (!chosen)
      return {
        ok: false,
        message: `no quantization ${ask.quant} in the repo; available: ${labels()}`,
        variants,
      };
  } else if (ask.file !== undefined) {
    chosen = variants.find((v) => v.files.includes(ask.file!));
    if (!chosen)
      return {
        ok: false,
        message: `the repo no longer has ${ask.file}; available: ${labels()}`,
        variants,
      };
  } else {
    chosen =
      variants.length === 1
        ? variants[0]
        : (variants.find((v) => v.label.toUpperCase() === PREFERRED_QUANT) ?? variants[0]);
  }
  const take = new Set<string>(chosen!.files);
  const projector = pickProjector(files, chosen!.label.toUpperCase());
  if (projector) take.add(projector.path);
  for (const f of files) if (!WEIGHT_EXT.test(f.path)) take.add(f.path);
  return {
    ok: true,
    files: files.filter((f) => take.has(f.path)),
    // An untagged file is named by its stem only where there was a choice to make.
    quant: quantOf(chosen!.files[0]!) ?? (variants.length > 1 ? chosen!.label : null),
    servedFile: servedOf(chosen!, files),
    variants,
  };
}
