// Encodes a GGUF v3 file (metadata, tensor infos, aligned tensor data) from in-memory values.
// Written to a temporary sibling and renamed, so a reader never sees a half-written model.
import { randomBytes } from "node:crypto";
import { open, rename, rm } from "node:fs/promises";
import { GgufError } from "./errors.ts";
import {
  GGML_MAX_DIMS,
  GGML_MAX_NAME_BYTES,
  GGML_TYPES,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_SCALAR_SIZE,
  GGUF_VALUE_TYPE_IDS,
  GGUF_VERSION,
  padTo,
  tensorByteSize,
  type GgmlType,
  type GgufScalarTypeName,
  type GgufValue,
} from "./types.ts";

export interface GgufTensorData {
  readonly name: string;
  /** Element counts in ggml order (ne[0] is the contiguous dimension). */
  readonly dims: readonly number[];
  readonly ggmlType: GgmlType;
  /** Exactly the tensor's byte size, little-endian. */
  readonly data: Uint8Array;
}

export interface GgufDocument {
  /** Written in iteration order; general.alignment (u32), when present, sets the data alignment. */
  readonly metadata: Iterable<readonly [string, GgufValue]>;
  readonly tensors: readonly GgufTensorData[];
}

/** Growable little-endian byte sink for the header. */
class Sink {
  private buf = Buffer.alloc(64 * 1024);
  length = 0;
  private room(n: number): void {
    if (this.length + n <= this.buf.length) return;
    const bigger = Buffer.alloc(Math.max(this.buf.length * 2, this.length + n));
    this.buf.copy(bigger, 0, 0, this.length);
    this.buf = bigger;
  }
  u32(v: number): void {
    this.room(4);
    this.length = this.buf.writeUInt32LE(v, this.length);
  }
  i32(v: number): void {
    this.room(4);
    this.length = this.buf.writeInt32LE(v, this.length);
  }
  u64(v: bigint | number): void {
    this.room(8);
    this.length = this.buf.writeBigUInt64LE(BigInt(v), this.length);
  }
  fixed(type: Exclude<GgufScalarTypeName, "str">, v: number | bigint | boolean): void {
    this.room(GGUF_SCALAR_SIZE[type]);
    const b = this.buf;
    const at = this.length;
    switch (type) {
      case "u8":
        this.length = b.writeUInt8(v as number, at);
        break;
      case "i8":
        this.length = b.writeInt8(v as number, at);
        break;
      case "u16":
        this.length = b.writeUInt16LE(v as number, at);
        break;
      case "i16":
        this.length = b.writeInt16LE(v as number, at);
        break;
      case "u32":
        this.length = b.writeUInt32LE(v as number, at);
        break;
      case "i32":
        this.length = b.writeInt32LE(v as number, at);
        break;
      case "f32":
        this.length = b.writeFloatLE(v as number, at);
        break;
      case "f64":
        this.length = b.writeDoubleLE(v as number, at);
        break;
      case "u64":
        this.length = b.writeBigUInt64LE(v as bigint, at);
        break;
      case "i64":
        this.length = b.writeBigInt64LE(v as bigint, at);
        break;
      case "bool":
        this.length = b.writeInt8(v ? 1 : 0, at);
        break;
    }
  }
  string(s: string): void {
    const bytes = Buffer.from(s, "utf8");
    this.u64(bytes.length);
    this.room(bytes.length);
    bytes.copy(this.buf, this.length);
    this.length += bytes.length;
  }
  zeros(n: number): void {
    this.room(n);
    this.buf.fill(0, this.length, this.length + n);
    this.length += n;
  }
  bytes(): Buffer {
    return this.buf.subarray(0, this.length);
  }
}

function writeValue(sink: Sink, key: string, v: GgufValue): void {
  sink.i32(GGUF_VALUE_TYPE_IDS[v.type]);
  if (v.type === "str") return sink.string(v.value);
  if (v.type !== "arr") return sink.fixed(v.type, v.value);
  if (v.items === null)
    throw new GgufError("invalid_options", `array '${key}' has no items to write`);
  sink.i32(GGUF_VALUE_TYPE_IDS[v.itemType]);
  sink.u64(v.items.length);
  if (v.itemType === "str") {
    for (const s of v.items as readonly string[]) sink.string(s);
  } else {
    for (const item of v.items) sink.fixed(v.itemType, item as number | bigint | boolean);
  }
}

export interface EncodedLayout {
  readonly header: Buffer;
  readonly alignment: number;
  /** Relative offset of each tensor in the data section. */
  readonly offsets: readonly number[];
  readonly fileBytes: number;
}

/** Builds the header bytes (padded to the alignment) and the data layout; validates every tensor. */
export function encodeGgufHeader(doc: GgufDocument): EncodedLayout {
  const entries = [...doc.metadata];
  const keys = new Set<string>();
  let alignment = GGUF_DEFAULT_ALIGNMENT;
  for (const [key, v] of entries) {
    if (key.length === 0) throw new GgufError("invalid_options", "empty metadata key");
    if (keys.has(key)) throw new GgufError("invalid_options", `duplicate metadata key '${key}'`);
    keys.add(key);
    if (key === "general.alignment") {
      if (v.type !== "u32" || v.value === 0 || (v.value & (v.value - 1)) !== 0) {
        throw new GgufError("invalid_options", "general.alignment must be a u32 power of two");
      }
      alignment = v.value;
    }
  }
  const sink = new Sink();
  sink.u32(GGUF_MAGIC);
  sink.u32(GGUF_VERSION);
  sink.u64(doc.tensors.length);
  sink.u64(entries.length);
  for (const [key, v] of entries) {
    sink.string(key);
    writeValue(sink, key, v);
  }
  const names = new Set<string>();
  const offsets: number[] = [];
  let offset = 0;
  for (const t of doc.tensors) {
    if (Buffer.byteLength(t.name) > GGML_MAX_NAME_BYTES)
      throw new GgufError("invalid_options", `tensor name '${t.name}' is too long`);
    if (names.has(t.name)) throw new GgufError("invalid_options", `duplicate tensor '${t.name}'`);
    names.add(t.name);
    if (
      t.dims.length === 0 ||
      t.dims.length > GGML_MAX_DIMS ||
      t.dims.some((d) => !Number.isSafeInteger(d) || d < 0)
    ) {
      throw new GgufError(
        "invalid_options",
        `tensor '${t.name}' has invalid dims [${t.dims.join(", ")}]`,
      );
    }
    const size = tensorByteSize(t.ggmlType, t.dims);
    if (size === null || Number(size) !== t.data.byteLength) {
      throw new GgufError(
        "invalid_options",
        `tensor '${t.name}' has ${t.data.byteLength} data bytes, expected ${size ?? "whole blocks"}`,
      );
    }
    sink.string(t.name);
    sink.u32(t.dims.length);
    for (const d of t.dims) sink.u64(d);
    sink.i32(GGML_TYPES[t.ggmlType].id);
    sink.u64(offset);
    offsets.push(offset);
    offset += padTo(t.data.byteLength, alignment);
  }
  if (doc.tensors.length > 0) sink.zeros(padTo(sink.length, alignment) - sink.length);
  const header = sink.bytes();
  const fileBytes = header.length + offset;
  return { header, alignment, offsets, fileBytes };
}

/**
 * Writes `doc` as a GGUF v3 file at `path` (atomically, via a temporary sibling).
 * Tensors are laid out in order, each padded to the alignment (the last one too, as ggml's writer does).
 */
export async function writeGguf(path: string, doc: GgufDocument): Promise<{ bytes: number }> {
  const layout = encodeGgufHeader(doc);
  const tmp = `${path}.${randomBytes(4).toString("hex")}.partial`;
  try {
    const fh = await open(tmp, "wx");
    try {
      await fh.write(layout.header);
      const pad = Buffer.alloc(layout.alignment);
      for (const t of doc.tensors) {
        await fh.write(t.data);
        const gap = padTo(t.data.byteLength, layout.alignment) - t.data.byteLength;
        if (gap > 0) await fh.write(pad, 0, gap);
      }
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, path);
  } catch (cause) {
    await rm(tmp, { force: true });
    if (cause instanceof GgufError) throw cause;
    throw new GgufError("io", `cannot write: ${(cause as Error).message}`, { path, cause });
  }
  return { bytes: layout.fileBytes };
}
