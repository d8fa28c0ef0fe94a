import { describe, expect, it } from "vitest";
import { encodeSafetensors, parseSafetensors } from "@ic/testkit";
import {
  encodeHeader,
  headerLength,
  parseHeader,
  planExtraction,
  SafetensorsFormatError,
} from "./safetensors.ts";
import type { ShardHeader } from "./safetensors.ts";

function shard(
  file: string,
  tensors: [string, number][],
): { file: string; bytes: Buffer; header: ShardHeader } {
  const bytes = encodeSafetensors(
    tensors.map(([name, n]) => ({
      name,
      dtype: "U8",
      shape: [n],
      data: new Uint8Array(n).fill(name.length),
    })),
  );
  const len = headerLength(bytes.subarray(0, 8), file);
  return {
    file,
    bytes,
    header: { file, header: parseHeader(bytes.subarray(8, 8 + len), len, file, bytes.length) },
  };
}

describe("safetensors headers", () => {
  it("parses offsets, dtypes and metadata of a real encoding", () => {
    const s = shard("a.safetensors", [
      ["x", 3],
      ["y", 5],
    ]);
    const y = s.header.header.tensors.get("y");
    expect(y).toMatchObject({ dtype: "U8", shape: [5], begin: 3, end: 8 });
    expect(s.header.header.dataStart).toBe(8 + s.header.header.headerLength);
  });

  it.each([
    ["not JSON", "{nope", /not valid JSON/],
    ["not an object", "[1,2]", /not a JSON object/],
    ["malformed entry", JSON.stringify({ t: { dtype: "F32", shape: [1] } }), /malformed/],
    [
      "inverted offsets",
      JSON.stringify({ t: { dtype: "F32", shape: [1], data_offsets: [8, 4] } }),
      /inverted/,
    ],
    [
      "past the end",
      JSON.stringify({ t: { dtype: "F32", shape: [1], data_offsets: [0, 4000] } }),
      /past the end/,
    ],
  ])("refuses a header that is %s", (_n, json, message) => {
    expect(() => parseHeader(json, json.length, "f", 100)).toThrow(message);
  });

  it("refuses implausible header lengths", () => {
    const prefix = new Uint8Array(8);
    expect(() => headerLength(prefix, "f")).toThrow(SafetensorsFormatError);
    new DataView(prefix.buffer).setBigUint64(0, 1n << 40n, true);
    expect(() => headerLength(prefix, "f")).toThrow(/implausible/);
  });

  it("encodes 8-byte aligned headers that other readers parse", () => {
    const header = encodeHeader([{ name: "t", dtype: "U8", shape: [2], bytes: 2 }], {
      format: "pt",
    });
    expect(header.byteLength % 8).toBe(0);
    const parsed = parseSafetensors(Buffer.concat([header, Buffer.from([1, 2])]));
    expect(parsed.metadata).toEqual({ format: "pt" });
    expect([...(parsed.tensors.get("t")?.data ?? [])]).toEqual([1, 2]);
  });
});

describe("planExtraction", () => {
  const a = shard("a.safetensors", [
    ["keep.0", 4],
    ["drop", 2],
    ["keep.1", 3],
    ["keep.2", 5],
  ]);
  const b = shard("b.safetensors", [
    ["keep.3", 7],
    ["other", 1],
  ]);

  it("orders by shard and offset and merges adjacent tensors into one Range read", () => {
    const plan = planExtraction([a.header, b.header], ["keep.3", "keep.2", "keep.0", "keep.1"], {
      format: "pt",
    });
    expect(plan.tensors).toEqual(["keep.0", "keep.1", "keep.2", "keep.3"]);
    const da = a.header.header.dataStart;
    const db = b.header.header.dataStart;
    expect(plan.reads).toEqual([
      { file: "a.safetensors", start: da, end: da + 4, tensors: ["keep.0"] },
      { file: "a.safetensors", start: da + 6, end: da + 14, tensors: ["keep.1", "keep.2"] },
      { file: "b.safetensors", start: db, end: db + 7, tensors: ["keep.3"] },
    ]);
    expect(plan.dataBytes).toBe(19);
    expect(plan.totalBytes).toBe(plan.header.byteLength + 19);
  });

  it("produces a file whose tensors are the source bytes when the reads are concatenated", () => {
    const plan = planExtraction([a.header, b.header], ["keep.1", "keep.3"], {});
    const files: Record<string, Buffer> = { "a.safetensors": a.bytes, "b.safetensors": b.bytes };
    const out = Buffer.concat([
      plan.header,
      ...plan.reads.map((r) => (files[r.file] ?? Buffer.alloc(0)).subarray(r.start, r.end)),
    ]);
    const parsed = parseSafetensors(out);
    expect([...parsed.tensors.keys()]).toEqual(["keep.1", "keep.3"]);
    expect(parsed.tensors.get("keep.1")?.data).toEqual(Buffer.alloc(3, "keep.1".length));
    expect(parsed.tensors.get("keep.3")?.data).toEqual(Buffer.alloc(7, "keep.3".length));
  });

  it("fails when an indexed tensor is missing from the headers", () => {
    expect(() => planExtraction([a.header], ["keep.0", "ghost"], {})).toThrow(
      /missing from the shard headers: ghost/,
    );
  });
});
