// Writes a tiny, deterministic vision projector GGUF (an "mmproj", ~200 kB) for the tiny text model.
// llama-server loads it with --mmproj and then accepts images, so tests cover image requests without real weights.
import { fnv1a, mulberry32 } from "@ic/protocol";
import { GgufError } from "./errors.ts";
import { TINY_MODEL_DEFAULTS } from "./tiny-model.ts";
import type { GgufValue } from "./types.ts";
import { writeGguf, type GgufTensorData } from "./writer.ts";

export interface TinyProjectorOptions {
  /** Output size: the text model's llama.embedding_length, which llama.cpp checks. Default 64. */
  readonly textEmbd?: number;
  /** Weight seed; the same seed and size give byte-identical files. Default 42. */
  readonly seed?: number;
}

export interface TinyProjector {
  readonly path: string;
  readonly bytes: number;
}

/**
 * The shape. The projector is LLaVA's "mlp": a CLIP-style vision encoder, then two linear layers
 * (mm.0, GELU, mm.2) into the text model's embedding space. It is the simplest one llama.cpp has.
 * A 32x32 image in 16x16 patches gives 4 image tokens. The server resizes any image to 32x32.
 * LLaVA takes the second-to-last layer's output, so only the first of the two layers runs.
 */
export const TINY_PROJECTOR_DEFAULTS = {
  projectorType: "mlp",
  imageSize: 32,
  patchSize: 16,
  nEmbd: 32,
  nHead: 2,
  nFf: 64,
  nLayer: 2,
  textEmbd: TINY_MODEL_DEFAULTS.nEmbd,
  seed: 42,
} as const;

/** CLIP's pixel normalization, as real LLaVA projectors carry it. */
const IMAGE_MEAN = [0.48145466, 0.4578275, 0.40821073];
const IMAGE_STD = [0.26862954, 0.26130258, 0.27577711];

/** The tensors the writer writes, in order. clip.cpp reads every one of them for an "mlp" projector. */
export function tinyProjectorTensorNames(
  nLayer: number = TINY_PROJECTOR_DEFAULTS.nLayer,
): string[] {
  const names = [
    "v.patch_embd.weight",
    "v.position_embd.weight",
    "v.pre_ln.weight",
    "v.pre_ln.bias",
  ];
  for (let i = 0; i < nLayer; i++) {
    for (const part of [
      "ln1",
      "attn_q",
      "attn_k",
      "attn_v",
      "attn_out",
      "ln2",
      "ffn_up",
      "ffn_down",
    ]) {
      names.push(`v.blk.${i}.${part}.weight`, `v.blk.${i}.${part}.bias`);
    }
  }
  names.push("mm.0.weight", "mm.0.bias", "mm.2.weight", "mm.2.bias");
  return names;
}

function projectorTensors(textEmbd: number, seed: number): GgufTensorData[] {
  const d = TINY_PROJECTOR_DEFAULTS;
  const nPatches = (d.imageSize / d.patchSize) ** 2;
  const tensors: GgufTensorData[] = [];
  const push = (name: string, dims: number[], fill: (rnd: () => number) => number): void => {
    const rnd = mulberry32(seed ^ fnv1a(name));
    const values = new Float32Array(dims.reduce((a, b) => a * b, 1));
    for (let i = 0; i < values.length; i++) values[i] = fill(rnd);
    tensors.push({
      name,
      dims,
      ggmlType: "F32",
      data: new Uint8Array(values.buffer, values.byteOffset, values.byteLength),
    });
  };
  // Uniform(-a, a) has variance a^2/3, so a = sqrt(3 / fanIn) gives unit-variance outputs.
  const weight = (name: string, fanIn: number, dims: number[]): void => {
    const a = Math.sqrt(3 / fanIn);
    push(name, dims, (rnd) => (rnd() * 2 - 1) * a);
  };
  const ones = (name: string, n: number): void => push(name, [n], () => 1);
  const zeros = (name: string, n: number): void => push(name, [n], () => 0);
  // ggml order (ne[0] first). A linear layer's weight is [in, out]; the patch embedding is a
  // convolution kernel [kernel width, kernel height, channels in, channels out].
  weight("v.patch_embd.weight", 3 * d.patchSize * d.patchSize, [
    d.patchSize,
    d.patchSize,
    3,
    d.nEmbd,
  ]);
  weight("v.position_embd.weight", 3, [d.nEmbd, nPatches]);
  ones("v.pre_ln.weight", d.nEmbd);
  zeros("v.pre_ln.bias", d.nEmbd);
  for (let i = 0; i < d.nLayer; i++) {
    const p = `v.blk.${i}`;
    ones(`${p}.ln1.weight`, d.nEmbd);
    zeros(`${p}.ln1.bias`, d.nEmbd);
    for (const m of ["attn_q", "attn_k", "attn_v", "attn_out"]) {
      weight(`${p}.${m}.weight`, d.nEmbd, [d.nEmbd, d.nEmbd]);
      zeros(`${p}.${m}.bias`, d.nEmbd);
    }
    ones(`${p}.ln2.weight`, d.nEmbd);
    zeros(`${p}.ln2.bias`, d.nEmbd);
    // nFf differs from nEmbd: clip.cpp swaps up and down when ffn_down's rows are nEmbd long.
    weight(`${p}.ffn_up.weight`, d.nEmbd, [d.nEmbd, d.nFf]);
    zeros(`${p}.ffn_up.bias`, d.nFf);
    weight(`${p}.ffn_down.weight`, d.nFf, [d.nFf, d.nEmbd]);
    zeros(`${p}.ffn_down.bias`, d.nEmbd);
  }
  weight("mm.0.weight", d.nEmbd, [d.nEmbd, textEmbd]);
  zeros("mm.0.bias", textEmbd);
  weight("mm.2.weight", textEmbd, [textEmbd, textEmbd]);
  zeros("mm.2.bias", textEmbd);
  return tensors;
}

function projectorMetadata(textEmbd: number): [string, GgufValue][] {
  const d = TINY_PROJECTOR_DEFAULTS;
  const u32 = (value: number): GgufValue => ({ type: "u32", value });
  const f32s = (items: number[]): GgufValue => ({
    type: "arr",
    itemType: "f32",
    length: items.length,
    items,
  });
  return [
    ["general.architecture", { type: "str", value: "clip" }],
    ["general.name", { type: "str", value: "tiny-clip-projector" }],
    ["general.alignment", u32(32)],
    ["general.file_type", u32(0)],
    ["clip.projector_type", { type: "str", value: d.projectorType }],
    ["clip.has_vision_encoder", { type: "bool", value: true }],
    ["clip.vision.image_size", u32(d.imageSize)],
    ["clip.vision.patch_size", u32(d.patchSize)],
    ["clip.vision.embedding_length", u32(d.nEmbd)],
    ["clip.vision.feed_forward_length", u32(d.nFf)],
    ["clip.vision.projection_dim", u32(textEmbd)],
    ["clip.vision.block_count", u32(d.nLayer)],
    ["clip.vision.attention.head_count", u32(d.nHead)],
    ["clip.vision.attention.layer_norm_epsilon", { type: "f32", value: 1e-5 }],
    ["clip.vision.image_mean", f32s(IMAGE_MEAN)],
    ["clip.vision.image_std", f32s(IMAGE_STD)],
  ];
}

/**
 * Writes a tiny "mlp" vision projector to `path` (replacing it atomically).
 * Pass the text model's embedding length as textEmbd, or llama.cpp refuses the pair.
 */
export async function writeTinyProjector(
  path: string,
  options: TinyProjectorOptions = {},
): Promise<TinyProjector> {
  const textEmbd = options.textEmbd ?? TINY_PROJECTOR_DEFAULTS.textEmbd;
  const seed = options.seed ?? TINY_PROJECTOR_DEFAULTS.seed;
  if (!Number.isSafeInteger(textEmbd) || textEmbd <= 0)
    throw new GgufError("invalid_options", `textEmbd must be a positive integer, got ${textEmbd}`);
  if (!Number.isSafeInteger(seed))
    throw new GgufError("invalid_options", `seed must be an integer, got ${seed}`);
  const { bytes } = await writeGguf(path, {
    metadata: projectorMetadata(textEmbd),
    tensors: projectorTensors(textEmbd, seed),
  });
  return { path, bytes };
}
