// The tiny model writer: facts read back match the options, the layout is what llama.cpp requires,
// output is deterministic, and the drafter shares the target's vocabulary and embeddings.
import { mkdtemp, open, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { GgufError } from "./errors.ts";
import { readGgufHeader, type GgufHeader } from "./reader.ts";
import { f32ToF16Bits, TINY_MODEL_DEFAULTS, writeTinyModel } from "./tiny-model.ts";
import {
  TINY_CHAT_TEMPLATE,
  TINY_SPECIAL,
  TINY_TOOL_CALL_TOKEN,
  TINY_TOOLS_CHAT_TEMPLATE,
  TINY_VOCAB,
  TOKEN_TYPE,
  unreachablePieces,
} from "./tiny-vocab.ts";

let dir = "";
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "ic-gguf-tiny-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function tensorBytes(header: GgufHeader, name: string): Promise<Buffer> {
  const t = header.tensors.find((x) => x.name === name);
  if (t === undefined) throw new Error(`no tensor ${name}`);
  const fh = await open(header.path, "r");
  try {
    const buf = Buffer.alloc(t.byteSize);
    await fh.read(buf, 0, t.byteSize, t.offset);
    return buf;
  } finally {
    await fh.close();
  }
}

const LLAMA_TENSORS_PER_LAYER = [
  "attn_norm",
  "attn_q",
  "attn_k",
  "attn_v",
  "attn_output",
  "ffn_norm",
  "ffn_gate",
  "ffn_up",
  "ffn_down",
];

describe("writeTinyModel", () => {
  test("writes a ~1 MB llama model whose facts match the defaults", async () => {
    const model = await writeTinyModel(join(dir, "default.gguf"));
    expect(model.bytes).toBeGreaterThan(500_000);
    expect(model.bytes).toBeLessThan(1_500_000);
    expect(model.facts).toEqual({
      architecture: "llama",
      name: "tiny-llama",
      blockCount: 4,
      contextLength: 2048,
      embeddingLength: 64,
      headCount: 4,
      headCountKv: 2,
      feedForwardLength: 128,
      vocabSize: TINY_VOCAB.tokens.length,
      tensorCount: 3 + 4 * LLAMA_TENSORS_PER_LAYER.length,
      weightsBytes: model.facts.weightsBytes,
      fileBytes: model.bytes,
      hasChatTemplate: true,
      templateTakesTools: false,
    });
    expect((await readFile(model.path)).length).toBe(model.bytes);
  });

  test("lays out every tensor llama needs, aligned and contiguous, ending at the end of the file", async () => {
    const model = await writeTinyModel(join(dir, "layout.gguf"), { nLayer: 2, nHeadKv: 4 });
    const h = await readGgufHeader(model.path);
    const nVocab = TINY_VOCAB.tokens.length;
    const expected = new Map<string, number[]>([
      ["token_embd.weight", [64, nVocab]],
      ["output_norm.weight", [64]],
      ["output.weight", [64, nVocab]],
    ]);
    for (let i = 0; i < 2; i++) {
      for (const [name, dims] of [
        ["attn_norm", [64]],
        ["attn_q", [64, 64]],
        ["attn_k", [64, 64]],
        ["attn_v", [64, 64]],
        ["attn_output", [64, 64]],
        ["ffn_norm", [64]],
        ["ffn_gate", [64, 128]],
        ["ffn_up", [64, 128]],
        ["ffn_down", [128, 64]],
      ] as const) {
        expected.set(`blk.${i}.${name}.weight`, [...dims]);
      }
    }
    expect(new Map(h.tensors.map((t) => [t.name, [...t.dims]]))).toEqual(expected);
    expect(h.alignment).toBe(32);
    expect(h.dataOffset % 32).toBe(0);
    let next = 0;
    for (const t of h.tensors) {
      expect(t.ggmlType).toBe("F32");
      expect(t.relativeOffset).toBe(next); // gguf.cpp rejects gaps or reordering
      expect(t.byteSize).toBe(t.dims.reduce((a, b) => a * b, 1) * 4);
      next += Math.ceil(t.byteSize / 32) * 32;
    }
    expect(h.dataOffset + next).toBe(h.fileBytes);
    expect(h.facts.headCountKv).toBe(4);
  });

  test("stores the shared vocabulary, special token ids and chat template", async () => {
    const { path } = await writeTinyModel(join(dir, "vocab.gguf"));
    const m = (await readGgufHeader(path)).metadata;
    expect(m.get("tokenizer.ggml.model")).toEqual({ type: "str", value: "llama" });
    expect(m.get("tokenizer.ggml.tokens")).toMatchObject({
      itemType: "str",
      items: TINY_VOCAB.tokens,
    });
    expect(m.get("tokenizer.ggml.token_type")).toMatchObject({
      itemType: "i32",
      items: TINY_VOCAB.tokenTypes,
    });
    expect(m.get("tokenizer.ggml.scores")).toMatchObject({
      itemType: "f32",
      items: TINY_VOCAB.scores,
    });
    expect(m.get("tokenizer.ggml.bos_token_id")).toEqual({
      type: "u32",
      value: TINY_SPECIAL.bos.id,
    });
    expect(m.get("tokenizer.ggml.eos_token_id")).toEqual({
      type: "u32",
      value: TINY_SPECIAL.eos.id,
    });
    expect(m.get("tokenizer.chat_template")).toEqual({ type: "str", value: TINY_CHAT_TEMPLATE });
    expect(m.get("general.alignment")).toEqual({ type: "u32", value: 32 });
  });

  test("is deterministic per seed", async () => {
    const a = await writeTinyModel(join(dir, "seed-a.gguf"), { seed: 5 });
    const b = await writeTinyModel(join(dir, "seed-b.gguf"), { seed: 5 });
    const c = await writeTinyModel(join(dir, "seed-c.gguf"), { seed: 6 });
    const [ba, bb, bc] = await Promise.all([readFile(a.path), readFile(b.path), readFile(c.path)]);
    expect(ba.equals(bb)).toBe(true);
    expect(ba.length).toBe(bc.length);
    expect(ba.equals(bc)).toBe(false);
  });

  test("a drafter has one layer, its own name, and the target's vocabulary, embeddings and first layer", async () => {
    const target = await readGgufHeader((await writeTinyModel(join(dir, "target.gguf"))).path);
    const drafter = await readGgufHeader(
      (await writeTinyModel(join(dir, "drafter.gguf"), { drafter: true })).path,
    );
    expect(drafter.facts.blockCount).toBe(TINY_MODEL_DEFAULTS.drafterLayers);
    expect(drafter.facts.name).toBe("tiny-llama-drafter");
    expect(drafter.facts.fileBytes).toBeLessThan(target.facts.fileBytes);
    expect(drafter.metadata.get("tokenizer.ggml.tokens")).toEqual(
      target.metadata.get("tokenizer.ggml.tokens"),
    );
    for (const name of ["token_embd.weight", "output.weight", "blk.0.attn_q.weight"]) {
      expect((await tensorBytes(drafter, name)).equals(await tensorBytes(target, name))).toBe(true);
    }
  });

  test("F16 weights halve the matrices and keep the norms F32", async () => {
    const f32 = await writeTinyModel(join(dir, "w32.gguf"));
    const f16 = await writeTinyModel(join(dir, "w16.gguf"), { weightType: "F16" });
    const h = await readGgufHeader(f16.path);
    expect(h.tensors.find((t) => t.name === "blk.0.attn_q.weight")?.ggmlType).toBe("F16");
    expect(h.tensors.find((t) => t.name === "blk.0.attn_norm.weight")?.ggmlType).toBe("F32");
    expect(h.metadata.get("general.file_type")).toEqual({ type: "u32", value: 1 });
    expect(f16.facts.weightsBytes).toBeLessThan(f32.facts.weightsBytes * 0.51);
  });

  test("Q8_0 weights are blocks of an f16 scale and 32 bytes that decode to the F32 values", async () => {
    const f32 = await writeTinyModel(join(dir, "q32.gguf"));
    const q8 = await writeTinyModel(join(dir, "q8.gguf"), { weightType: "Q8_0" });
    const h = await readGgufHeader(q8.path);
    expect(h.tensors.find((t) => t.name === "blk.0.ffn_down.weight")?.ggmlType).toBe("Q8_0");
    expect(h.metadata.get("general.file_type")).toEqual({ type: "u32", value: 7 });
    const raw = await tensorBytes(h, "blk.0.attn_q.weight");
    const ref = await tensorBytes(await readGgufHeader(f32.path), "blk.0.attn_q.weight");
    const want = new Float32Array(ref.buffer.slice(ref.byteOffset, ref.byteOffset + ref.length));
    expect(raw.length).toBe((want.length / 32) * 34);
    const view = new DataView(raw.buffer, raw.byteOffset, raw.length);
    const f16 = (bits: number) => {
      const e = (bits >> 10) & 0x1f;
      const m = bits & 0x3ff;
      return (e === 0 ? m / 1024 : 1 + m / 1024) * 2 ** ((e === 0 ? 1 : e) - 15);
    };
    for (let b = 0; b < want.length / 32; b++) {
      const d = f16(view.getUint16(b * 34, true));
      for (let i = 0; i < 32; i++) {
        // Half a step, plus what rounding the scale to f16 moves the largest value (127 steps).
        const got = view.getInt8(b * 34 + 2 + i) * d;
        expect(Math.abs(got - want[b * 32 + i]!)).toBeLessThanOrEqual(d * 0.6 + 1e-6);
      }
    }
    expect(q8.bytes).toBeLessThan(f32.bytes * 0.5);
    await expect(
      writeTinyModel(join(dir, "bad.gguf"), {
        weightType: "Q8_0",
        nEmbd: 48,
        nHead: 4,
        nHeadKv: 2,
      }),
    ).rejects.toThrow(/multiples of 32/);
  });

  test("only text pieces have output weights, so special and byte tokens are never generated", async () => {
    const h = await readGgufHeader((await writeTinyModel(join(dir, "out.gguf"))).path);
    const out = await tensorBytes(h, "output.weight");
    const row = (t: number): Float32Array =>
      new Float32Array(out.buffer.slice(out.byteOffset + t * 256, out.byteOffset + (t + 1) * 256));
    TINY_VOCAB.tokenTypes.forEach((type, t) => {
      const nonZero = row(t).some((v) => v !== 0);
      expect(nonZero, TINY_VOCAB.tokens[t]).toBe(type === TOKEN_TYPE.normal);
    });
  });

  test("a tools model adds the tool-call token, reads it from a constant feature, and renders tools", async () => {
    const h = await readGgufHeader(
      (await writeTinyModel(join(dir, "tools.gguf"), { tools: true })).path,
    );
    const m = h.metadata;
    expect(m.get("tokenizer.chat_template")).toEqual({
      type: "str",
      value: TINY_TOOLS_CHAT_TEMPLATE,
    });
    expect(m.get("tokenizer.ggml.add_space_prefix")).toEqual({ type: "bool", value: false });
    expect(m.get("tokenizer.ggml.tokens")).toMatchObject({
      items: [...TINY_VOCAB.tokens, TINY_TOOL_CALL_TOKEN],
    });
    const nEmbd = TINY_MODEL_DEFAULTS.nEmbd;
    const call = TINY_VOCAB.tokens.length;
    const out = await tensorBytes(h, "output.weight");
    const row = new Float32Array(
      out.buffer.slice(out.byteOffset + call * nEmbd * 4, out.byteOffset + (call + 1) * nEmbd * 4),
    );
    expect(row[0]).toBe(10);
    expect(row.slice(1).every((v) => v === 0)).toBe(true);
    const embd = await tensorBytes(h, "token_embd.weight");
    const first = (t: number) => embd.readFloatLE(t * nEmbd * 4);
    expect([0, 7, call].map(first)).toEqual([6, 6, 6]);
    // The plain model has neither.
    const plain = (await readGgufHeader((await writeTinyModel(join(dir, "plain.gguf"))).path))
      .metadata;
    expect(plain.has("tokenizer.ggml.add_space_prefix")).toBe(false);
  });

  test.each([
    [{ nEmbd: 65 }, /multiple of nHead/],
    [{ nHead: 4, nHeadKv: 3 }, /multiple of nHeadKv/],
    [{ nEmbd: 12, nHead: 4 }, /even/],
    [{ nLayer: 0 }, /positive integer/],
    [{ contextLength: 1.5 }, /positive integer/],
  ])("rejects %o", async (options, message) => {
    const err = await writeTinyModel(join(dir, "bad.gguf"), options).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(GgufError);
    expect(err).toMatchObject({ code: "invalid_options", message: expect.stringMatching(message) });
  });
});

describe("tiny vocabulary", () => {
  test("has the SPM special tokens and all 256 byte tokens at fixed ids", () => {
    expect(TINY_VOCAB.tokens.slice(0, 5)).toEqual([
      "<unk>",
      "<s>",
      "</s>",
      "<|im_start|>",
      "<|im_end|>",
    ]);
    expect(TINY_VOCAB.tokens[5]).toBe("<0x00>");
    expect(TINY_VOCAB.tokens[5 + 0x0a]).toBe("<0x0A>");
    expect(TINY_VOCAB.tokens[5 + 255]).toBe("<0xFF>");
    expect(TINY_VOCAB.tokenTypes.slice(5, 261).every((t) => t === TOKEN_TYPE.byte)).toBe(true);
    expect(new Set(TINY_VOCAB.tokens).size).toBe(TINY_VOCAB.tokens.length);
  });

  test("every multi-character piece is reachable by an SPM merge", () => {
    expect(unreachablePieces()).toEqual([]);
    expect(unreachablePieces({ tokens: ["a", "xyz"], scores: [0, 0], tokenTypes: [1, 1] })).toEqual(
      ["xyz"],
    );
  });
});

describe("f32ToF16Bits", () => {
  test.each([
    [0, 0x0000],
    [-0, 0x8000],
    [1, 0x3c00],
    [-2, 0xc000],
    [0.1, 0x2e66],
    [65504, 0x7bff],
    [65520, 0x7c00], // rounds up to infinity
    [1e6, 0x7c00],
    [Number.NEGATIVE_INFINITY, 0xfc00],
    [2 ** -24, 0x0001], // smallest subnormal
    [2 ** -14, 0x0400], // smallest normal
    [2 ** -26, 0x0000], // underflows to zero
  ])("%d encodes as %i", (value, bits) => {
    expect(f32ToF16Bits(value)).toBe(bits);
  });

  test("NaN stays NaN", () => {
    const bits = f32ToF16Bits(Number.NaN);
    expect(bits & 0x7c00).toBe(0x7c00);
    expect(bits & 0x03ff).not.toBe(0);
  });
});
