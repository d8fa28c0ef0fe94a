// Writes a tiny, deterministic llama-architecture GGUF (~1 MB) that the real llama-server loads and serves.
// Tests and the demo use it instead of downloading weights; a drafter variant shares the vocabulary for -md.
import { fnv1a, mulberry32 } from "@ic/protocol";
import { GgufError } from "./errors.ts";
import type { ModelFacts } from "./facts.ts";
import { readGgufHeader } from "./reader.ts";
import {
  TINY_CHAT_TEMPLATE,
  TINY_SPECIAL,
  TINY_TOOLS_CHAT_TEMPLATE,
  TINY_TOOL_CALL_TOKEN,
  TOKEN_TYPE,
  tinyVocab,
} from "./tiny-vocab.ts";
import type { GgmlType, GgufValue } from "./types.ts";
import { writeGguf, type GgufTensorData } from "./writer.ts";

export interface TinyModelOptions {
  /** Hidden size (llama.embedding_length). Default 64. */
  readonly nEmbd?: number;
  /** Attention heads. Default 4. */
  readonly nHead?: number;
  /** KV heads (grouped-query attention when below nHead). Default 2. */
  readonly nHeadKv?: number;
  /** Feed-forward size. Default 128. */
  readonly nFf?: number;
  /** Layers. Default 4, or 1 for a drafter. */
  readonly nLayer?: number;
  /** Trained context length. Default 2048. */
  readonly contextLength?: number;
  /** Weight seed; the same seed and shape give byte-identical files. Default 42. */
  readonly seed?: number;
  /** Storage type of the 2-D weight matrices; norms stay F32. Default "F32". */
  readonly weightType?: "F32" | "F16" | "Q8_0";
  /** A drafter for speculative decoding: by default one layer and the name "tiny-llama-drafter". */
  readonly drafter?: boolean;
  /** general.name. Default "tiny-llama" (or "tiny-llama-drafter"). */
  readonly name?: string;
  /**
   * A chat template that renders tools and tool calls (Qwen/Hermes style, TINY_TOOLS_CHAT_TEMPLATE),
   * so llama-server parses tool calls and constrains `tool_choice: "required"` to one. Also turns the
   * tokenizer's space prefix off: llama-server feeds the generation prompt through the tool grammar,
   * and a space before "assistant" would not match it. Default false.
   */
  readonly tools?: boolean;
}

export interface TinyModel {
  readonly path: string;
  readonly bytes: number;
  /** Read back from the written file, so they reflect what llama.cpp will see. */
  readonly facts: ModelFacts;
}

export const TINY_MODEL_DEFAULTS = {
  nEmbd: 64,
  nHead: 4,
  nHeadKv: 2,
  nFf: 128,
  nLayer: 4,
  drafterLayers: 1,
  contextLength: 2048,
  seed: 42,
  weightType: "F32",
} as const;

/** Logit standard deviation of text tokens; large enough that zero-logit (special, byte) tokens are practically never sampled. */
const OUTPUT_LOGIT_STD = 5;

/** One float32's bits (a scratch value shared by every call: no allocation per value). */
const scratchF32 = new Float32Array(1);
const scratchBits = new Uint32Array(scratchF32.buffer);

/** IEEE 754 binary32 -> binary16 bits, round to nearest even. */
export function f32ToF16Bits(value: number): number {
  scratchF32[0] = value;
  return f32BitsToF16Bits(scratchBits[0]!);
}

/** `f32ToF16Bits` of a float32 given by its bits. */
function f32BitsToF16Bits(x: number): number {
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rem > mid || (rem === mid && (half & 1) === 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (half & 1) === 1)) half++; // a carry into the exponent is correct
  return sign | half;
}

/** Q8_0: blocks of 32 values, each an f16 scale (max |x| / 127) and 32 signed bytes x / scale. */
function encodeQ8_0(values: Float32Array): Uint8Array {
  const blocks = values.length / 32;
  const out = new Uint8Array(blocks * 34);
  const view = new DataView(out.buffer);
  for (let b = 0; b < blocks; b++) {
    let amax = 0;
    for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(values[b * 32 + i] ?? 0));
    const d = amax / 127;
    view.setUint16(b * 34, f32ToF16Bits(d), true);
    for (let i = 0; i < 32; i++) {
      const q = d === 0 ? 0 : Math.round((values[b * 32 + i] ?? 0) / d);
      view.setInt8(b * 34 + 2 + i, Math.max(-127, Math.min(127, q)));
    }
  }
  return out;
}

function encode(values: Float32Array, type: GgmlType): Uint8Array {
  if (type === "F32") return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  if (type === "Q8_0") return encodeQ8_0(values);
  // The values' bits read in place: the slow test model is ~15M values, and converting each
  // through a fresh typed array took ~15 s of CPU per model written.
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  const out = new Uint16Array(values.length);
  for (let i = 0; i < bits.length; i++) out[i] = f32BitsToF16Bits(bits[i]!);
  return new Uint8Array(out.buffer);
}

type Shape = Required<Omit<TinyModelOptions, "drafter" | "name" | "tools">>;

function resolve(options: TinyModelOptions): Shape & { name: string; tools: boolean } {
  const d = TINY_MODEL_DEFAULTS;
  const shape = {
    nEmbd: options.nEmbd ?? d.nEmbd,
    nHead: options.nHead ?? d.nHead,
    nHeadKv: options.nHeadKv ?? d.nHeadKv,
    nFf: options.nFf ?? d.nFf,
    nLayer: options.nLayer ?? (options.drafter === true ? d.drafterLayers : d.nLayer),
    contextLength: options.contextLength ?? d.contextLength,
    seed: options.seed ?? d.seed,
    weightType: options.weightType ?? d.weightType,
  };
  for (const [k, v] of Object.entries(shape)) {
    if (typeof v === "number" && !(Number.isSafeInteger(v) && (v > 0 || k === "seed"))) {
      throw new GgufError("invalid_options", `${k} must be a positive integer, got ${v}`);
    }
  }
  if (shape.nEmbd % shape.nHead !== 0)
    throw new GgufError(
      "invalid_options",
      `nEmbd ${shape.nEmbd} is not a multiple of nHead ${shape.nHead}`,
    );
  if (shape.nHead % shape.nHeadKv !== 0)
    throw new GgufError(
      "invalid_options",
      `nHead ${shape.nHead} is not a multiple of nHeadKv ${shape.nHeadKv}`,
    );
  if ((shape.nEmbd / shape.nHead) % 2 !== 0)
    throw new GgufError("invalid_options", "the head size must be even for RoPE");
  if (shape.weightType !== "F32" && shape.weightType !== "F16" && shape.weightType !== "Q8_0")
    throw new GgufError("invalid_options", `weightType ${String(shape.weightType)}`);
  // Q8_0 quantizes rows in blocks of 32: every weight's row length must be a multiple of it.
  if (shape.weightType === "Q8_0" && (shape.nEmbd % 32 !== 0 || shape.nFf % 32 !== 0))
    throw new GgufError("invalid_options", "Q8_0 needs nEmbd and nFf to be multiples of 32");
  return {
    ...shape,
    name: options.name ?? (options.drafter === true ? "tiny-llama-drafter" : "tiny-llama"),
    tools: options.tools === true,
  };
}

/**
 * Tensors of a llama model. Each tensor's values come from its own seed (seed ^ hash(name)), so a drafter
 * with the same seed and width shares token_embd, output and its first layers with the target.
 */
/**
 * A tools model's pull towards calling: every token embedding gets TOOLS_BIAS in dimension 0, which
 * survives the layers and the final norm as a near-constant feature, and the tool-call token's output
 * row reads it with weight TOOLS_CALL_WEIGHT. Its logit (~50) then beats every text piece's (std 5),
 * so the model starts each answer with a call, as a model tuned for tools does when offered them.
 */
const TOOLS_BIAS = 6;
const TOOLS_CALL_WEIGHT = 10;
/**
 * The byte tokens of JSON's punctuation and the call's closing tag: a small pull (+5) so that where
 * the tool grammar allows either whitespace or the next character, the model writes the character.
 */
const JSON_PUNCTUATION = new Set(
  [..."{}[]:,<>/_"].map((c) => TINY_SPECIAL.imEnd.id + 1 + c.charCodeAt(0)),
);

function tinyTensors(s: Shape & { tools: boolean }): GgufTensorData[] {
  const vocab = tinyVocab(s.tools);
  const nVocab = vocab.tokens.length;
  const headDim = s.nEmbd / s.nHead;
  const nEmbdKv = headDim * s.nHeadKv;
  const tensors: GgufTensorData[] = [];
  // A weight tensor, of the model's weight type: uniform(-scale, scale), then `adjust`ed.
  const uniform = (
    name: string,
    dims: number[],
    scale: number,
    adjust?: (values: Float32Array) => void,
  ): void => {
    const rnd = mulberry32(s.seed ^ fnv1a(name));
    const values = new Float32Array(dims.reduce((a, b) => a * b, 1));
    for (let i = 0; i < values.length; i++) values[i] = (rnd() * 2 - 1) * scale;
    adjust?.(values);
    tensors.push({ name, dims, ggmlType: s.weightType, data: encode(values, s.weightType) });
  };
  const ones = (name: string, n: number): void => {
    tensors.push({
      name,
      dims: [n],
      ggmlType: "F32",
      data: encode(new Float32Array(n).fill(1), "F32"),
    });
  };
  // Uniform(-a, a) has variance a^2/3, so a = sqrt(3 / fanIn) gives unit-variance outputs.
  const scaleFor = (fanIn: number): number => Math.sqrt(3 / fanIn);
  const w = s.weightType;
  uniform("token_embd.weight", [s.nEmbd, nVocab], 1, (values) => {
    if (s.tools) for (let t = 0; t < nVocab; t++) values[t * s.nEmbd] = TOOLS_BIAS;
  });
  for (let i = 0; i < s.nLayer; i++) {
    ones(`blk.${i}.attn_norm.weight`, s.nEmbd);
    uniform(`blk.${i}.attn_q.weight`, [s.nEmbd, s.nEmbd], scaleFor(s.nEmbd));
    uniform(`blk.${i}.attn_k.weight`, [s.nEmbd, nEmbdKv], scaleFor(s.nEmbd));
    uniform(`blk.${i}.attn_v.weight`, [s.nEmbd, nEmbdKv], scaleFor(s.nEmbd));
    uniform(`blk.${i}.attn_output.weight`, [s.nEmbd, s.nEmbd], scaleFor(s.nEmbd));
    ones(`blk.${i}.ffn_norm.weight`, s.nEmbd);
    uniform(`blk.${i}.ffn_gate.weight`, [s.nEmbd, s.nFf], scaleFor(s.nEmbd));
    uniform(`blk.${i}.ffn_up.weight`, [s.nEmbd, s.nFf], scaleFor(s.nEmbd));
    uniform(`blk.${i}.ffn_down.weight`, [s.nFf, s.nEmbd], scaleFor(s.nFf));
  }
  ones("output_norm.weight", s.nEmbd);
  // Output rows of special and byte tokens are zero: their logit is exactly 0 while text pieces get
  // logits with std OUTPUT_LOGIT_STD, so generations are readable text (always valid UTF-8) and never
  // end early; every completion runs to max_tokens.
  const rnd = mulberry32(s.seed ^ fnv1a("output.weight"));
  const out = new Float32Array(s.nEmbd * nVocab);
  const scale = OUTPUT_LOGIT_STD * scaleFor(s.nEmbd);
  for (let t = 0; t < nVocab; t++) {
    const text = vocab.tokenTypes[t] === TOKEN_TYPE.normal;
    for (let j = 0; j < s.nEmbd; j++) {
      const r = (rnd() * 2 - 1) * scale;
      out[t * s.nEmbd + j] = text ? r : 0;
    }
    if (!s.tools) continue;
    if (vocab.tokens[t] === TINY_TOOL_CALL_TOKEN) {
      out.fill(0, t * s.nEmbd, (t + 1) * s.nEmbd);
      out[t * s.nEmbd] = TOOLS_CALL_WEIGHT;
    } else if (JSON_PUNCTUATION.has(t)) out[t * s.nEmbd] = 1;
  }
  tensors.push({
    name: "output.weight",
    dims: [s.nEmbd, nVocab],
    ggmlType: w,
    data: encode(out, w),
  });
  return tensors;
}

function tinyMetadata(s: Shape & { name: string; tools: boolean }): [string, GgufValue][] {
  const u32 = (value: number): GgufValue => ({ type: "u32", value });
  const f32 = (value: number): GgufValue => ({ type: "f32", value });
  const str = (value: string): GgufValue => ({ type: "str", value });
  const v = tinyVocab(s.tools);
  return [
    ["general.architecture", str("llama")],
    ["general.name", str(s.name)],
    ["general.alignment", u32(32)],
    // llama_ftype: 0 = ALL_F32, 1 = MOSTLY_F16, 7 = MOSTLY_Q8_0
    ["general.file_type", u32({ F32: 0, F16: 1, Q8_0: 7 }[s.weightType])],
    ["llama.context_length", u32(s.contextLength)],
    ["llama.embedding_length", u32(s.nEmbd)],
    ["llama.block_count", u32(s.nLayer)],
    ["llama.feed_forward_length", u32(s.nFf)],
    ["llama.attention.head_count", u32(s.nHead)],
    ["llama.attention.head_count_kv", u32(s.nHeadKv)],
    ["llama.attention.layer_norm_rms_epsilon", f32(1e-5)],
    ["llama.rope.dimension_count", u32(s.nEmbd / s.nHead)],
    ["llama.rope.freq_base", f32(10000)],
    ["llama.vocab_size", u32(v.tokens.length)],
    ["tokenizer.ggml.model", str("llama")],
    [
      "tokenizer.ggml.tokens",
      { type: "arr", itemType: "str", length: v.tokens.length, items: v.tokens },
    ],
    [
      "tokenizer.ggml.scores",
      { type: "arr", itemType: "f32", length: v.scores.length, items: v.scores },
    ],
    [
      "tokenizer.ggml.token_type",
      { type: "arr", itemType: "i32", length: v.tokenTypes.length, items: v.tokenTypes },
    ],
    ["tokenizer.ggml.bos_token_id", u32(TINY_SPECIAL.bos.id)],
    ["tokenizer.ggml.eos_token_id", u32(TINY_SPECIAL.eos.id)],
    ["tokenizer.ggml.unknown_token_id", u32(TINY_SPECIAL.unk.id)],
    ["tokenizer.ggml.add_bos_token", { type: "bool", value: true }],
    ["tokenizer.ggml.add_eos_token", { type: "bool", value: false }],
    ...(s.tools
      ? [["tokenizer.ggml.add_space_prefix", { type: "bool", value: false }] as [string, GgufValue]]
      : []),
    ["tokenizer.chat_template", str(s.tools ? TINY_TOOLS_CHAT_TEMPLATE : TINY_CHAT_TEMPLATE)],
  ];
}

/**
 * Writes a tiny llama GGUF to `path` (replacing it atomically) and returns its facts as read back.
 * Same options, same bytes: weights come from a seeded PRNG.
 */
export async function writeTinyModel(
  path: string,
  options: TinyModelOptions = {},
): Promise<TinyModel> {
  const s = resolve(options);
  const { bytes } = await writeGguf(path, { metadata: tinyMetadata(s), tensors: tinyTensors(s) });
  const { facts } = await readGgufHeader(path);
  return { path, bytes, facts };
}
