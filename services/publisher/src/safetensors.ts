// Safetensors headers: parse the JSON header read by Range requests, and plan an extraction.
// A plan says which absolute byte ranges of which shard to copy, in order, under a new header.
import { z } from "zod";

/** Headers larger than this are refused (real ones are a few MB even for huge MoEs). */
export const MAX_HEADER_BYTES = 100 * 1024 * 1024;

export interface TensorEntry {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
  /** Offsets relative to the start of the data section, end exclusive. */
  readonly begin: number;
  readonly end: number;
}

export interface SafetensorsHeader {
  /** Bytes of JSON after the 8-byte length prefix. */
  readonly headerLength: number;
  /** Absolute offset of the data section: 8 + headerLength. */
  readonly dataStart: number;
  readonly metadata: Readonly<Record<string, string>> | null;
  readonly tensors: ReadonlyMap<string, TensorEntry>;
}

const TensorInfoSchema = z.object({
  dtype: z.string().min(1),
  shape: z.array(z.number().int().nonnegative()),
  data_offsets: z.tuple([z.number().int().nonnegative(), z.number().int().nonnegative()]),
});
const MetadataSchema = z.record(z.string(), z.string());

export class SafetensorsFormatError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SafetensorsFormatError";
  }
}

/** Reads the u64 little-endian header length from the first 8 bytes of a file. */
export function headerLength(prefix: Uint8Array, file: string): number {
  if (prefix.byteLength < 8)
    throw new SafetensorsFormatError(`${file}: shorter than the 8-byte header length`);
  const n = new DataView(prefix.buffer, prefix.byteOffset, 8).getBigUint64(0, true);
  if (n === 0n || n > BigInt(MAX_HEADER_BYTES)) {
    throw new SafetensorsFormatError(`${file}: implausible header length ${n}`);
  }
  return Number(n);
}

/** Parses and validates the JSON header; offsets must lie inside the file when its size is known. */
export function parseHeader(
  json: Uint8Array | string,
  length: number,
  file: string,
  fileSize?: number,
): SafetensorsHeader {
  let raw: unknown;
  try {
    raw = JSON.parse(typeof json === "string" ? json : new TextDecoder().decode(json));
  } catch {
    throw new SafetensorsFormatError(`${file}: header is not valid JSON`);
  }
  if (!raw || typeof raw !== "object" || Array.isArray(raw)) {
    throw new SafetensorsFormatError(`${file}: header is not a JSON object`);
  }
  const dataStart = 8 + length;
  const tensors = new Map<string, TensorEntry>();
  let metadata: Record<string, string> | null = null;
  for (const [name, value] of Object.entries(raw as Record<string, unknown>)) {
    if (name === "__metadata__") {
      const m = MetadataSchema.safeParse(value);
      if (m.success) metadata = m.data;
      continue;
    }
    const info = TensorInfoSchema.safeParse(value);
    if (!info.success)
      throw new SafetensorsFormatError(`${file}: tensor ${name} has a malformed entry`);
    const [begin, end] = info.data.data_offsets;
    if (end < begin)
      throw new SafetensorsFormatError(`${file}: tensor ${name} has inverted data_offsets`);
    if (fileSize !== undefined && dataStart + end > fileSize) {
      throw new SafetensorsFormatError(`${file}: tensor ${name} ends past the end of the file`);
    }
    tensors.set(name, { name, dtype: info.data.dtype, shape: info.data.shape, begin, end });
  }
  return { headerLength: length, dataStart, metadata, tensors };
}

/** Header bytes (length prefix included) for tensors laid out back to back in the given order. */
export function encodeHeader(
  tensors: ReadonlyArray<{ name: string; dtype: string; shape: readonly number[]; bytes: number }>,
  metadata: Record<string, string>,
): Uint8Array {
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const t of tensors) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.bytes] };
    offset += t.bytes;
  }
  let json = JSON.stringify(header);
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  json += " ".repeat((8 - (new TextEncoder().encode(json).byteLength % 8)) % 8);
  const body = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + body.byteLength);
  new DataView(out.buffer).setBigUint64(0, BigInt(body.byteLength), true);
  out.set(body, 8);
  return out;
}

export interface ShardHeader {
  readonly file: string;
  readonly header: SafetensorsHeader;
}

export interface RangeRead {
  readonly file: string;
  /** Absolute byte offsets in the shard, end exclusive. */
  readonly start: number;
  readonly end: number;
  readonly tensors: readonly string[];
}

export interface ExtractionPlan {
  readonly header: Uint8Array;
  /** Tensors in output order. */
  readonly tensors: readonly string[];
  /** Coalesced reads in output order; their concatenation is the output's data section. */
  readonly reads: readonly RangeRead[];
  readonly dataBytes: number;
  readonly totalBytes: number;
}

/**
 * Plans a new safetensors file holding exactly `keys`, ordered by shard then offset so each shard
 * is read front to back, with adjacent tensors merged into one Range read. Throws when a key is in
 * no header.
 */
export function planExtraction(
  shards: readonly ShardHeader[],
  keys: readonly string[],
  metadata: Record<string, string>,
): ExtractionPlan {
  const wanted = new Set(keys);
  const found: { file: string; shardIndex: number; entry: TensorEntry; dataStart: number }[] = [];
  const seen = new Set<string>();
  shards.forEach(({ file, header }, shardIndex) => {
    for (const entry of header.tensors.values()) {
      if (!wanted.has(entry.name) || seen.has(entry.name)) continue;
      seen.add(entry.name);
      found.push({ file, shardIndex, entry, dataStart: header.dataStart });
    }
  });
  const missing = keys.filter((k) => !seen.has(k));
  if (missing.length > 0) {
    throw new SafetensorsFormatError(
      `tensors listed in the index are missing from the shard headers: ${missing.slice(0, 5).join(", ")}`,
    );
  }
  found.sort((a, b) => a.shardIndex - b.shardIndex || a.entry.begin - b.entry.begin);

  const reads: { file: string; start: number; end: number; tensors: string[] }[] = [];
  for (const f of found) {
    const start = f.dataStart + f.entry.begin;
    const end = f.dataStart + f.entry.end;
    const last = reads[reads.length - 1];
    if (last && last.file === f.file && last.end === start) {
      last.end = end;
      last.tensors.push(f.entry.name);
    } else {
      reads.push({ file: f.file, start, end, tensors: [f.entry.name] });
    }
  }
  const header = encodeHeader(
    found.map((f) => ({
      name: f.entry.name,
      dtype: f.entry.dtype,
      shape: f.entry.shape,
      bytes: f.entry.end - f.entry.begin,
    })),
    metadata,
  );
  const dataBytes = found.reduce((a, f) => a + (f.entry.end - f.entry.begin), 0);
  return {
    header,
    tensors: found.map((f) => f.entry.name),
    reads,
    dataBytes,
    totalBytes: header.byteLength + dataBytes,
  };
}
