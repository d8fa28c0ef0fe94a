// Pure detection rules: which tensors are MTP heads, the quantization and tier of a repo, derived names.
// Every rule is a small function over plain data so it is tested by tables, never through the network.
import type { RepoId } from "./model-ref.ts";
import { parseRepoId, repoName, repoOwner } from "./model-ref.ts";

/** Quantizations accepted by POST /api/register. */
export const ALLOWED_QUANTS: readonly string[] = ["q4k"];

/** Full-precision values; everything else counts as a quantized derivative. */
export const FULL_PRECISION_QUANTS: readonly string[] = ["bf16", "fp16", "f32"];

export const TIERS = ["full", "expert-server"] as const;
export type Tier = (typeof TIERS)[number];

export const SIDECAR_FILE = "mtp.safetensors";

type Json = Record<string, unknown>;

function obj(v: unknown): Json | null {
  return v && typeof v === "object" && !Array.isArray(v) ? (v as Json) : null;
}

function int(v: unknown): number | null {
  return typeof v === "number" && Number.isInteger(v) && v >= 0 ? v : null;
}

/** Layer counts from config.json, looking into `text_config` for multimodal wrappers. */
export function layerCounts(config: Json | null): { hidden: number | null; nextn: number } {
  const scopes = [config, obj(config?.["text_config"])].filter((s): s is Json => s !== null);
  let hidden: number | null = null;
  let nextn = 0;
  for (const s of scopes) {
    hidden ??= int(s["num_hidden_layers"]);
    nextn = Math.max(
      nextn,
      int(s["num_nextn_predict_layers"]) ?? 0,
      int(s["mtp_num_hidden_layers"]) ?? 0,
    );
  }
  return { hidden, nextn };
}

const MTP_PREFIX = /(^|\.)mtp[._]/;
const LAYER = /^(?:model\.)?(?:language_model\.)?(?:model\.)?layers\.(\d+)\./;

/**
 * MTP head tensors: anything under an `mtp` module, and `...layers.N.*` for N at or beyond
 * `num_hidden_layers` when the config declares next-token-prediction layers. Sorted.
 */
export function findMtpKeys(keys: Iterable<string>, config: Json | null): string[] {
  const { hidden, nextn } = layerCounts(config);
  const out: string[] = [];
  for (const key of keys) {
    if (key === "__metadata__") continue;
    if (MTP_PREFIX.test(key)) {
      out.push(key);
      continue;
    }
    const m = LAYER.exec(key);
    if (m && hidden !== null && nextn > 0 && Number(m[1]) >= hidden) out.push(key);
  }
  return out.sort();
}

export interface QuantInput {
  readonly name: string;
  readonly files: readonly string[];
  readonly config: Json | null;
}

const QUANT_TOKENS: ReadonlyArray<[RegExp, string]> = [
  [/(^|[^a-z0-9])q4[_-]?k([_-][sml])?($|[^a-z0-9])/i, "q4k"],
  [/(^|[^a-z0-9])q8[_-]?k([_-][sml])?($|[^a-z0-9])/i, "q8k"],
  [/(^|[^a-z0-9])(fp8|f8[_-]?e4m3)($|[^a-z0-9])/i, "fp8"],
];

const TORCH_DTYPES: Readonly<Record<string, string>> = {
  bfloat16: "bf16",
  float16: "fp16",
  float32: "f32",
};

function tokenQuant(text: string): string | null {
  for (const [re, q] of QUANT_TOKENS) if (re.test(text)) return q;
  return null;
}

/**
 * Quantization, in order of evidence: a token in the repo name (`Q4_K_M`, `q4k`, `Q8_K`, `FP8`),
 * then in weight file names, then `quantization_config.quant_method`, then `torch_dtype`.
 * `unknown` when nothing says.
 */
export function detectQuant(input: QuantInput): string {
  const byName = tokenQuant(input.name);
  if (byName) return byName;
  for (const f of input.files) {
    if (!/\.(gguf|safetensors|bin)$/i.test(f)) continue;
    const q = tokenQuant(f.split("/").pop() ?? f);
    if (q) return q;
  }
  const scopes = [input.config, obj(input.config?.["text_config"])];
  for (const s of scopes) {
    const method = obj(s?.["quantization_config"])?.["quant_method"];
    if (typeof method === "string" && method !== "")
      return method.toLowerCase() === "fp8" ? "fp8" : method.toLowerCase();
  }
  for (const s of scopes) {
    const dtype = s?.["torch_dtype"] ?? s?.["dtype"];
    if (typeof dtype === "string" && TORCH_DTYPES[dtype]) return TORCH_DTYPES[dtype];
  }
  return "unknown";
}

/** `expert-server` for expert-server slices (by name or card `tier`), otherwise `full`. */
export function detectTier(name: string, cardData: Json | null): Tier {
  const declared = cardData?.["tier"];
  if (typeof declared === "string" && (TIERS as readonly string[]).includes(declared))
    return declared as Tier;
  return /expert[-_]?server/i.test(name) ? "expert-server" : "full";
}

/** The first `base_model` of a model card (string or list), as a repo id. */
export function cardBaseModel(cardData: Json | null): RepoId | null {
  const v = cardData?.["base_model"];
  const first = Array.isArray(v) ? v[0] : v;
  return typeof first === "string" ? parseRepoId(first) : null;
}

/** The companion assistant repo a card declares (`assistant_model`), as a repo id. */
export function cardAssistantModel(cardData: Json | null): RepoId | null {
  const v = cardData?.["assistant_model"];
  return typeof v === "string" ? parseRepoId(v) : null;
}

/** Where an assistant model is looked for when the card names none: `<repo>-assistant`. */
export function assistantCandidates(model: RepoId, base: RepoId | null): RepoId[] {
  const out = [`${repoOwner(model)}/${repoName(model)}-assistant`];
  if (base) out.push(`${repoOwner(base)}/${repoName(base)}-assistant`);
  return [...new Set(out)].map((s) => parseRepoId(s)).filter((s): s is RepoId => s !== null);
}

/** The sidecar repo for a model's MTP heads: `<owner of the model>/<base name>-MTP`. */
export function sidecarRepoFor(model: RepoId, base: RepoId): RepoId | null {
  return parseRepoId(`${repoOwner(model)}/${repoName(base)}-MTP`);
}

/** Catalog key: the repo name in lower case, non-alphanumerics collapsed to `-`. */
export function catalogKey(model: RepoId): string {
  return repoName(model)
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "");
}

/** Directory name a model occupies in the cluster's store: `<owner>--<name>`. */
export function outputName(model: RepoId): string {
  return `${repoOwner(model)}--${repoName(model)}`;
}
