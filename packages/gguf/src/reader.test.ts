// Reader behaviour on valid, huge (sparse) and corrupt files: every malformation is a typed GgufError.
// Corrupt headers are hand-assembled byte by byte, since the writer refuses to produce them.
import { mkdtemp, open, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { GgufError, type GgufErrorCode } from "./errors.ts";
import { readGgufHeader, type ReadGgufOptions } from "./reader.ts";
import type { GgufValue } from "./types.ts";
import { writeGguf } from "./writer.ts";
import { GiB } from "@ic/protocol";

/** Little-endian byte builder for hand-made (possibly invalid) GGUF headers. */
class Bytes {
  private parts: Buffer[] = [];
  private push(size: number, write: (b: Buffer) => void): this {
    const b = Buffer.alloc(size);
    write(b);
    this.parts.push(b);
    return this;
  }
  u32(v: number): this {
    return this.push(4, (b) => b.writeUInt32LE(v));
  }
  i32(v: number): this {
    return this.push(4, (b) => b.writeInt32LE(v));
  }
  u64(v: bigint | number): this {
    return this.push(8, (b) => b.writeBigUInt64LE(BigInt(v)));
  }
  i64(v: bigint | number): this {
    return this.push(8, (b) => b.writeBigInt64LE(BigInt(v)));
  }
  str(s: string): this {
    const raw = Buffer.from(s);
    return this.u64(raw.length).raw(raw);
  }
  raw(b: Buffer): this {
    this.parts.push(b);
    return this;
  }
  /** magic, version, tensor count, kv count */
  header(nTensors: number | bigint, nKv: number | bigint, version = 3): this {
    return this.raw(Buffer.from("GGUF")).u32(version).u64(nTensors).u64(nKv);
  }
  kvU32(key: string, v: number): this {
    return this.str(key).i32(4).u32(v);
  }
  tensor(name: string, dims: (number | bigint)[], type: number, offset: number | bigint): this {
    this.str(name).u32(dims.length);
    for (const d of dims) this.i64(d);
    return this.i32(type).u64(offset);
  }
  build(): Buffer {
    return Buffer.concat(this.parts);
  }
}

let dir = "";
let n = 0;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "ic-gguf-reader-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function fileOf(bytes: Buffer, padTo?: number): Promise<string> {
  const path = join(dir, `f${n++}.gguf`);
  await writeFile(path, bytes);
  if (padTo !== undefined) {
    const fh = await open(path, "r+");
    await fh.truncate(padTo); // sparse: no disk blocks, no memory
    await fh.close();
  }
  return path;
}

async function codeOf(path: string, options?: ReadGgufOptions): Promise<GgufErrorCode> {
  try {
    await readGgufHeader(path, options);
  } catch (e) {
    expect(e).toBeInstanceOf(GgufError);
    return (e as GgufError).code;
  }
  throw new Error("expected readGgufHeader to fail");
}

describe("readGgufHeader on valid files", () => {
  test("round-trips every value type the writer can express", async () => {
    const metadata: [string, GgufValue][] = [
      ["a.u8", { type: "u8", value: 255 }],
      ["a.i8", { type: "i8", value: -128 }],
      ["a.u16", { type: "u16", value: 65535 }],
      ["a.i16", { type: "i16", value: -32768 }],
      ["a.u32", { type: "u32", value: 4294967295 }],
      ["a.i32", { type: "i32", value: -2147483648 }],
      ["a.f32", { type: "f32", value: 1.5 }],
      ["a.f64", { type: "f64", value: Math.PI }],
      ["a.u64", { type: "u64", value: 2n ** 64n - 1n }],
      ["a.i64", { type: "i64", value: -(2n ** 63n) }],
      ["a.bool", { type: "bool", value: true }],
      ["a.str", { type: "str", value: "héllo ▁ wörld" }],
      ["a.arr.str", { type: "arr", itemType: "str", length: 3, items: ["", "x", "<0x0A>"] }],
      ["a.arr.i32", { type: "arr", itemType: "i32", length: 3, items: [-1, 0, 7] }],
      ["a.arr.f32", { type: "arr", itemType: "f32", length: 2, items: [0.25, -2] }],
      ["a.arr.u64", { type: "arr", itemType: "u64", length: 2, items: [0n, 2n ** 40n] }],
      ["a.arr.bool", { type: "arr", itemType: "bool", length: 2, items: [false, true] }],
      ["a.arr.empty", { type: "arr", itemType: "u8", length: 0, items: [] }],
    ];
    const path = join(dir, "types.gguf");
    const { bytes } = await writeGguf(path, { metadata, tensors: [] });
    const header = await readGgufHeader(path);
    expect(header.version).toBe(3);
    expect(header.fileBytes).toBe(bytes);
    expect(header.tensors).toEqual([]);
    expect([...header.metadata]).toEqual(metadata);
    // No tensors: the data section starts right after the header, unpadded (as in gguf.cpp).
    expect(header.dataOffset).toBe(bytes);
  });

  test("skips arrays longer than keepArrayItemsUpTo but keeps their length", async () => {
    const items = Array.from({ length: 100 }, (_, i) => `tok${i}`);
    const path = join(dir, "long-array.gguf");
    await writeGguf(path, {
      metadata: [
        ["tokenizer.ggml.tokens", { type: "arr", itemType: "str", length: items.length, items }],
        [
          "tokenizer.ggml.scores",
          { type: "arr", itemType: "f32", length: 100, items: new Array<number>(100).fill(0) },
        ],
        ["after", { type: "str", value: "still parsed" }],
      ],
      tensors: [],
    });
    const header = await readGgufHeader(path, { keepArrayItemsUpTo: 10 });
    expect(header.metadata.get("tokenizer.ggml.tokens")).toEqual({
      type: "arr",
      itemType: "str",
      length: 100,
      items: null,
    });
    expect(header.metadata.get("tokenizer.ggml.scores")).toEqual({
      type: "arr",
      itemType: "f32",
      length: 100,
      items: null,
    });
    expect(header.metadata.get("after")).toEqual({ type: "str", value: "still parsed" });
    expect(header.facts.vocabSize).toBe(100);
  });

  test("reads a 4 GiB model's header without reading its tensor data", async () => {
    const dims = [1024, 1024, 1024];
    const head = new Bytes()
      .header(2, 2)
      .str("general.architecture")
      .i32(8)
      .str("llama")
      .kvU32("llama.block_count", 1);
    head.tensor("big.weight", dims, 0, 0).tensor("q.weight", [4096, 4096], 2, 4n * 1024n ** 3n);
    const unpadded = head.build();
    const dataOffset = Math.ceil(unpadded.length / 32) * 32;
    const qBytes = ((4096 * 4096) / 32) * 18;
    const total = dataOffset + 4 * 1024 ** 3 + qBytes;
    const path = await fileOf(
      Buffer.concat([unpadded, Buffer.alloc(dataOffset - unpadded.length)]),
      total,
    );

    const t0 = performance.now();
    const header = await readGgufHeader(path);
    expect(performance.now() - t0).toBeLessThan(2_000);
    expect(header.fileBytes).toBe(total);
    expect(header.dataOffset).toBe(dataOffset);
    expect(header.tensors).toEqual([
      {
        name: "big.weight",
        dims,
        ggmlType: "F32",
        ggmlTypeId: 0,
        relativeOffset: 0,
        offset: dataOffset,
        byteSize: 4 * 1024 ** 3,
      },
      {
        name: "q.weight",
        dims: [4096, 4096],
        ggmlType: "Q4_0",
        ggmlTypeId: 2,
        relativeOffset: 4 * 1024 ** 3,
        offset: dataOffset + 4 * 1024 ** 3,
        byteSize: qBytes,
      },
    ]);
    expect(header.facts).toMatchObject({
      architecture: "llama",
      blockCount: 1,
      weightsBytes: 4 * 1024 ** 3 + qBytes,
      fileBytes: total,
      tensorCount: 2,
    });
  });
});

describe("readGgufHeader on corrupt files gives typed errors", () => {
  const cases: {
    name: string;
    bytes: () => Buffer;
    code: GgufErrorCode;
    sparseSize?: number;
    options?: ReadGgufOptions;
  }[] = [
    { name: "empty file", bytes: () => Buffer.alloc(0), code: "truncated" },
    { name: "wrong magic", bytes: () => Buffer.from("GGML\x03\x00\x00\x00"), code: "bad_magic" },
    {
      name: "version 1",
      bytes: () => new Bytes().header(0, 0, 1).build(),
      code: "unsupported_version",
    },
    {
      name: "version 4",
      bytes: () => new Bytes().header(0, 0, 4).build(),
      code: "unsupported_version",
    },
    {
      name: "big-endian version",
      bytes: () => new Bytes().header(0, 0, 0x03000000).build(),
      code: "unsupported_version",
    },
    {
      name: "cut inside the counts",
      bytes: () => new Bytes().header(0, 1).build().subarray(0, 20),
      code: "truncated",
    },
    {
      name: "absurd tensor count",
      bytes: () => new Bytes().header(2n ** 62n, 0).build(),
      code: "limit_exceeded",
    },
    {
      name: "tensor count beyond the file",
      bytes: () => new Bytes().header(1000, 0).build(),
      code: "truncated",
    },
    {
      name: "absurd metadata count",
      bytes: () => new Bytes().header(0, 2n ** 63n).build(),
      code: "limit_exceeded",
    },
    {
      name: "key length of 2^62",
      bytes: () =>
        new Bytes()
          .header(0, 1)
          .u64(2n ** 62n)
          .raw(Buffer.alloc(64))
          .build(),
      code: "limit_exceeded",
    },
    {
      name: "key length beyond a multi-GB file (but under the limit)",
      bytes: () => new Bytes().header(0, 1).u64(20_000_000).build(),
      code: "limit_exceeded",
      sparseSize: 3 * GiB,
      options: { maxStringBytes: 64 * 1024 ** 2, maxHeaderBytes: 16 * 1024 ** 2 },
    },
    {
      name: "string value longer than the file",
      bytes: () => new Bytes().header(0, 1).str("k").i32(8).u64(1000).build(),
      code: "truncated",
    },
    {
      name: "empty key",
      bytes: () => new Bytes().header(0, 1).str("").i32(4).u32(1).build(),
      code: "invalid_metadata",
    },
    {
      name: "duplicate key",
      bytes: () => new Bytes().header(0, 2).kvU32("k", 1).kvU32("k", 2).build(),
      code: "invalid_metadata",
    },
    {
      name: "unknown value type",
      bytes: () => new Bytes().header(0, 1).str("k").i32(13).u32(0).build(),
      code: "invalid_metadata",
    },
    {
      name: "array of arrays",
      bytes: () => new Bytes().header(0, 1).str("k").i32(9).i32(9).u64(0).build(),
      code: "invalid_metadata",
    },
    {
      name: "array length of 2^60",
      bytes: () =>
        new Bytes()
          .header(0, 1)
          .str("k")
          .i32(9)
          .i32(0)
          .u64(2n ** 60n)
          .build(),
      code: "limit_exceeded",
    },
    {
      name: "array longer than the file",
      bytes: () => new Bytes().header(0, 1).str("k").i32(9).i32(4).u64(1_000_000).build(),
      code: "truncated",
    },
    {
      name: "array of a billion bytes in a 2 GiB file",
      bytes: () => new Bytes().header(0, 1).str("k").i32(9).i32(0).u64(1_000_000_000).build(),
      code: "limit_exceeded",
      sparseSize: 2 * GiB,
    },
    {
      name: "alignment not a power of two",
      bytes: () => new Bytes().header(0, 1).kvU32("general.alignment", 48).build(),
      code: "invalid_metadata",
    },
    {
      name: "alignment of the wrong type",
      bytes: () => new Bytes().header(0, 1).str("general.alignment").i32(5).i32(32).build(),
      code: "invalid_metadata",
    },
    {
      name: "five dimensions",
      bytes: () => new Bytes().header(1, 0).tensor("t", [1, 1, 1, 1, 1], 0, 0).build(),
      code: "invalid_tensor",
    },
    {
      name: "negative dimension",
      bytes: () => new Bytes().header(1, 0).tensor("t", [-4], 0, 0).build(),
      code: "invalid_tensor",
    },
    {
      name: "unknown ggml type",
      bytes: () => new Bytes().header(1, 0).tensor("t", [4], 4, 0).build(),
      code: "invalid_tensor",
    },
    {
      name: "row not a whole Q4_0 block",
      bytes: () => new Bytes().header(1, 0).tensor("t", [33, 2], 2, 0).build(),
      code: "invalid_tensor",
    },
    {
      name: "unaligned tensor offset",
      bytes: () => new Bytes().header(1, 0).tensor("t", [4], 0, 4).build(),
      code: "invalid_tensor",
      sparseSize: 1024,
    },
    {
      name: "duplicate tensor name",
      bytes: () => new Bytes().header(2, 0).tensor("t", [4], 0, 0).tensor("t", [4], 0, 32).build(),
      code: "invalid_tensor",
    },
    {
      name: "tensor name of 64 bytes",
      bytes: () => new Bytes().header(1, 0).tensor("x".repeat(64), [4], 0, 0).build(),
      code: "invalid_tensor",
    },
    {
      name: "tensor data past the end of the file",
      bytes: () => new Bytes().header(1, 0).tensor("t", [1024], 0, 0).build(),
      code: "truncated",
    },
    {
      name: "header larger than maxHeaderBytes",
      bytes: () => new Bytes().header(0, 1).str("k").i32(8).str("v".repeat(4096)).build(),
      code: "limit_exceeded",
      options: { maxHeaderBytes: 1024 },
    },
  ];

  test.each(cases)("$name -> $code", async ({ bytes, code, sparseSize, options }) => {
    const path = await fileOf(bytes(), sparseSize);
    expect(await codeOf(path, options)).toBe(code);
  });

  test("a missing file is a retryable io error naming the path", async () => {
    const path = join(dir, "missing.gguf");
    const err = await readGgufHeader(path).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(GgufError);
    expect(err).toMatchObject({ code: "io", retryable: true, path });
  });

  test("malformed-file errors are not retryable", async () => {
    const path = await fileOf(Buffer.from("nope"));
    await expect(readGgufHeader(path)).rejects.toMatchObject({
      code: "bad_magic",
      retryable: false,
    });
  });
});
