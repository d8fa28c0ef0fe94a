// Minimal safetensors encoder and parser for fixtures and for verifying uploaded files in tests.
// Layout: u64 little-endian header length, JSON header (space-padded to 8 bytes), tensor data.

export const DTYPE_BYTES: Readonly<Record<string, number>> = {
  F64: 8,
  F32: 4,
  F16: 2,
  BF16: 2,
  I64: 8,
  I32: 4,
  I16: 2,
  I8: 1,
  U8: 1,
  BOOL: 1,
  F8_E4M3: 1,
  F8_E5M2: 1,
};

export interface TensorSpec {
  readonly name: string;
  readonly dtype: string;
  readonly shape: readonly number[];
}

export interface TensorWithData extends TensorSpec {
  readonly data: Uint8Array;
}

export interface ParsedTensor {
  readonly dtype: string;
  readonly shape: number[];
  readonly data: Buffer;
}

export interface ParsedSafetensors {
  readonly metadata: Record<string, string> | null;
  /** Byte length of the JSON header (without the 8-byte prefix). */
  readonly headerLength: number;
  readonly tensors: Map<string, ParsedTensor>;
}

export function tensorBytes(spec: TensorSpec): number {
  const size = DTYPE_BYTES[spec.dtype];
  if (size === undefined) throw new Error(`unknown dtype ${spec.dtype}`);
  return spec.shape.reduce((a, b) => a * b, 1) * size;
}

/** Header bytes (with the length prefix) laying the tensors out back to back in the given order. */
export function safetensorsHeader(
  tensors: readonly TensorSpec[],
  metadata?: Record<string, string>,
): Buffer {
  const header: Record<string, unknown> = {};
  if (metadata) header["__metadata__"] = metadata;
  let offset = 0;
  for (const t of tensors) {
    const n = tensorBytes(t);
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + n] };
    offset += n;
  }
  let json = JSON.stringify(header);
  json += " ".repeat((8 - (Buffer.byteLength(json) % 8)) % 8);
  const body = Buffer.from(json);
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(body.length));
  return Buffer.concat([prefix, body]);
}

export function encodeSafetensors(
  tensors: readonly TensorWithData[],
  metadata?: Record<string, string>,
): Buffer {
  for (const t of tensors) {
    if (t.data.byteLength !== tensorBytes(t))
      throw new Error(
        `${t.name}: data has ${t.data.byteLength} bytes, shape needs ${tensorBytes(t)}`,
      );
  }
  return Buffer.concat([safetensorsHeader(tensors, metadata), ...tensors.map((t) => t.data)]);
}

export function parseSafetensors(buf: Uint8Array): ParsedSafetensors {
  const b = Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
  if (b.length < 8) throw new Error("safetensors file shorter than its length prefix");
  const headerLength = Number(b.readBigUInt64LE(0));
  if (8 + headerLength > b.length)
    throw new Error("safetensors header runs past the end of the file");
  const header = JSON.parse(b.subarray(8, 8 + headerLength).toString("utf8")) as Record<
    string,
    unknown
  >;
  const dataStart = 8 + headerLength;
  const tensors = new Map<string, ParsedTensor>();
  let metadata: Record<string, string> | null = null;
  for (const [name, raw] of Object.entries(header)) {
    if (name === "__metadata__") {
      metadata = raw as Record<string, string>;
      continue;
    }
    const info = raw as { dtype: string; shape: number[]; data_offsets: [number, number] };
    const [begin, end] = info.data_offsets;
    if (dataStart + end > b.length) throw new Error(`${name}: data runs past the end of the file`);
    tensors.set(name, {
      dtype: info.dtype,
      shape: info.shape,
      data: b.subarray(dataStart + begin, dataStart + end),
    });
  }
  return { metadata, headerLength, tensors };
}
