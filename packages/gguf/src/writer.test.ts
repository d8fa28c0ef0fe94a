// The generic writer refuses documents llama.cpp would reject, and never leaves a partial file behind.
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { readGgufHeader } from "./reader.ts";
import type { GgufValue } from "./types.ts";
import { encodeGgufHeader, writeGguf, type GgufDocument, type GgufTensorData } from "./writer.ts";

let dir = "";
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "ic-gguf-writer-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const f32 = (name: string, dims: number[]): GgufTensorData => ({
  name,
  dims,
  ggmlType: "F32",
  data: new Uint8Array(dims.reduce((a, b) => a * b, 1) * 4),
});

describe("writeGguf", () => {
  test("honours general.alignment for the data section and each tensor", async () => {
    const path = join(dir, "align.gguf");
    const { bytes } = await writeGguf(path, {
      metadata: [["general.alignment", { type: "u32", value: 64 }]],
      tensors: [
        f32("a", [3]),
        f32("b", [5, 2]),
        { name: "q", dims: [32], ggmlType: "Q8_0", data: new Uint8Array(34) },
      ],
    });
    const h = await readGgufHeader(path);
    expect(h.alignment).toBe(64);
    expect(h.dataOffset % 64).toBe(0);
    expect(h.tensors.map((t) => [t.name, t.relativeOffset, t.byteSize])).toEqual([
      ["a", 0, 12],
      ["b", 64, 40],
      ["q", 128, 34],
    ]);
    expect(bytes).toBe(h.dataOffset + 192);
    expect(h.fileBytes).toBe(bytes);
  });

  test.each<[string, GgufDocument, RegExp]>([
    [
      "duplicate keys",
      {
        metadata: [
          ["k", { type: "u8", value: 1 }],
          ["k", { type: "u8", value: 2 }],
        ],
        tensors: [],
      },
      /duplicate metadata key/,
    ],
    [
      "alignment of 24",
      { metadata: [["general.alignment", { type: "u32", value: 24 }]], tensors: [] },
      /power of two/,
    ],
    [
      "alignment as u64",
      { metadata: [["general.alignment", { type: "u64", value: 32n }]], tensors: [] },
      /power of two/,
    ],
    [
      "data of the wrong length",
      { metadata: [], tensors: [{ ...f32("t", [4]), data: new Uint8Array(15) }] },
      /expected 16/,
    ],
    [
      "rows not a whole block",
      {
        metadata: [],
        tensors: [{ name: "q", dims: [16], ggmlType: "Q4_0", data: new Uint8Array(9) }],
      },
      /whole blocks/,
    ],
    [
      "duplicate tensor names",
      { metadata: [], tensors: [f32("t", [1]), f32("t", [1])] },
      /duplicate tensor/,
    ],
    ["a 64-byte tensor name", { metadata: [], tensors: [f32("n".repeat(64), [1])] }, /too long/],
    ["five dimensions", { metadata: [], tensors: [f32("t", [1, 1, 1, 1, 1])] }, /invalid dims/],
    [
      "an array without items",
      {
        metadata: [
          ["k", { type: "arr", itemType: "str", length: 3, items: null } satisfies GgufValue],
        ],
        tensors: [],
      },
      /no items/,
    ],
  ])("rejects %s", async (_, doc, message) => {
    expect(() => encodeGgufHeader(doc)).toThrow(message);
    const path = join(dir, "rejected.gguf");
    await expect(writeGguf(path, doc)).rejects.toMatchObject({ code: "invalid_options" });
    expect((await readdir(dir)).filter((f) => f.startsWith("rejected"))).toEqual([]);
  });

  test("an unwritable path is an io error and leaves no partial file", async () => {
    await expect(
      writeGguf(join(dir, "no-such-dir", "m.gguf"), { metadata: [], tensors: [] }),
    ).rejects.toMatchObject({ code: "io" });
  });
});
