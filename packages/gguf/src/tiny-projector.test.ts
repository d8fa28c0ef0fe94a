// The tiny vision projector: read back, it has the keys and tensors llama.cpp's clip loader needs for an
// "mlp" projector, with shapes that fit the tiny text model, and it is deterministic per seed.
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { GgufError } from "./errors.ts";
import { readGgufHeader, type GgufHeader } from "./reader.ts";
import { TINY_MODEL_DEFAULTS } from "./tiny-model.ts";
import {
  TINY_PROJECTOR_DEFAULTS,
  tinyProjectorTensorNames,
  writeTinyProjector,
} from "./tiny-projector.ts";

let dir = "";
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "ic-gguf-projector-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function dimsOf(header: GgufHeader): Map<string, readonly number[]> {
  return new Map(header.tensors.map((t) => [t.name, t.dims]));
}

/**
 * What tools/mtmd/clip.cpp needs for an "mlp" projector, written out here rather than taken from the
 * writer: the loader requires attn_out, ffn_up and ffn_down per layer; the LLaVA graph also uses the
 * patch and position embeddings, q/k/v, and mm.0 and mm.2 (mm.2's rows give the output size).
 */
function loaderNeeds(nLayer: number): string[] {
  const names = ["v.patch_embd.weight", "v.position_embd.weight"];
  for (let i = 0; i < nLayer; i++) {
    for (const part of ["attn_q", "attn_k", "attn_v", "attn_out", "ffn_up", "ffn_down"]) {
      names.push(`v.blk.${i}.${part}.weight`);
    }
  }
  return [...names, "mm.0.weight", "mm.0.bias", "mm.2.weight", "mm.2.bias"];
}

describe("writeTinyProjector", () => {
  test("writes a small clip GGUF with an mlp projector and the keys the loader reads", async () => {
    const p = await writeTinyProjector(join(dir, "default.gguf"));
    expect(p.bytes).toBeLessThan(1_000_000);
    expect((await readFile(p.path)).length).toBe(p.bytes);
    const h = await readGgufHeader(p.path);
    expect(h.facts.architecture).toBe("clip");
    const d = TINY_PROJECTOR_DEFAULTS;
    const meta = Object.fromEntries(h.metadata);
    expect(meta["clip.projector_type"]).toEqual({ type: "str", value: "mlp" });
    expect(meta["clip.has_vision_encoder"]).toEqual({ type: "bool", value: true });
    // clip.cpp reads these with gguf_get_val_u32, which aborts on any other type.
    const u32s: Record<string, number> = {
      "clip.vision.image_size": d.imageSize,
      "clip.vision.patch_size": d.patchSize,
      "clip.vision.embedding_length": d.nEmbd,
      "clip.vision.feed_forward_length": d.nFf,
      "clip.vision.projection_dim": TINY_MODEL_DEFAULTS.nEmbd,
      "clip.vision.block_count": d.nLayer,
      "clip.vision.attention.head_count": d.nHead,
    };
    for (const [key, value] of Object.entries(u32s))
      expect(meta[key]).toEqual({ type: "u32", value });
    expect(meta["clip.vision.attention.layer_norm_epsilon"]?.type).toBe("f32");
    for (const key of ["clip.vision.image_mean", "clip.vision.image_std"]) {
      expect(meta[key]).toMatchObject({ type: "arr", itemType: "f32", length: 3 });
    }
  });

  test("has every tensor the loader needs, with shapes that chain into the text model", async () => {
    const p = await writeTinyProjector(join(dir, "tensors.gguf"));
    const h = await readGgufHeader(p.path);
    const dims = dimsOf(h);
    for (const name of loaderNeeds(TINY_PROJECTOR_DEFAULTS.nLayer))
      expect(dims.has(name)).toBe(true);
    expect([...dims.keys()].sort()).toEqual(tinyProjectorTensorNames().sort());
    // mm.3 would make clip.cpp treat the file as the Yi-style "mlp_norm" projector.
    expect(dims.has("mm.3.weight")).toBe(false);
    expect(h.tensors.every((t) => t.ggmlType === "F32")).toBe(true);
    const { imageSize, patchSize, nEmbd, nFf } = TINY_PROJECTOR_DEFAULTS;
    const text = TINY_MODEL_DEFAULTS.nEmbd;
    expect(dims.get("v.patch_embd.weight")).toEqual([patchSize, patchSize, 3, nEmbd]);
    expect(dims.get("v.position_embd.weight")).toEqual([nEmbd, (imageSize / patchSize) ** 2]);
    expect(dims.get("v.blk.0.attn_q.weight")).toEqual([nEmbd, nEmbd]);
    // Not swapped: clip.cpp swaps up and down when ffn_down's first dimension is nEmbd.
    expect(dims.get("v.blk.0.ffn_up.weight")).toEqual([nEmbd, nFf]);
    expect(dims.get("v.blk.0.ffn_down.weight")).toEqual([nFf, nEmbd]);
    expect(dims.get("mm.0.weight")).toEqual([nEmbd, text]);
    expect(dims.get("mm.2.weight")).toEqual([text, text]);
    expect(dims.get("mm.2.bias")).toEqual([text]);
  });

  test("textEmbd sets the output size for a wider text model", async () => {
    const p = await writeTinyProjector(join(dir, "wide.gguf"), { textEmbd: 128 });
    const h = await readGgufHeader(p.path);
    const dims = dimsOf(h);
    expect(dims.get("mm.0.weight")).toEqual([TINY_PROJECTOR_DEFAULTS.nEmbd, 128]);
    expect(dims.get("mm.2.weight")).toEqual([128, 128]);
    expect(h.metadata.get("clip.vision.projection_dim")).toEqual({ type: "u32", value: 128 });
  });

  test("is deterministic per seed", async () => {
    const a = await writeTinyProjector(join(dir, "a.gguf"), { seed: 7 });
    const b = await writeTinyProjector(join(dir, "b.gguf"), { seed: 7 });
    const c = await writeTinyProjector(join(dir, "c.gguf"), { seed: 8 });
    const [ba, bb, bc] = await Promise.all([a, b, c].map((x) => readFile(x.path)));
    expect(ba?.equals(bb as Buffer)).toBe(true);
    expect(ba?.equals(bc as Buffer)).toBe(false);
  });

  test("rejects a non-positive textEmbd", async () => {
    await expect(writeTinyProjector(join(dir, "bad.gguf"), { textEmbd: 0 })).rejects.toThrow(
      GgufError,
    );
  });
});
