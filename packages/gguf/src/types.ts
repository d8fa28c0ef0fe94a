// GGUF value and ggml tensor type tables, shared by the reader and the writer.
// Numbers mirror ggml/include/gguf.h, ggml/include/ggml.h and gguf-py GGML_QUANT_SIZES of llama.cpp.

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as a little-endian u32
export const GGUF_VERSION = 3;
export const GGUF_DEFAULT_ALIGNMENT = 32;
/** GGML_MAX_NAME is 64 including the terminating NUL. */
export const GGML_MAX_NAME_BYTES = 63;
export const GGML_MAX_DIMS = 4;

/** gguf_type ids as written in the file. */
export const GGUF_VALUE_TYPE_IDS = {
  u8: 0,
  i8: 1,
  u16: 2,
  i16: 3,
  u32: 4,
  i32: 5,
  f32: 6,
  bool: 7,
  str: 8,
  arr: 9,
  u64: 10,
  i64: 11,
  f64: 12,
} as const;
export type GgufValueTypeName = keyof typeof GGUF_VALUE_TYPE_IDS;
export type GgufScalarTypeName = Exclude<GgufValueTypeName, "arr">;
export type GgufNumberTypeName = "u8" | "i8" | "u16" | "i16" | "u32" | "i32" | "f32" | "f64";
export type GgufBigIntTypeName = "u64" | "i64";

const VALUE_TYPE_BY_ID = new Map<number, GgufValueTypeName>(
  Object.entries(GGUF_VALUE_TYPE_IDS).map(([name, id]) => [id, name as GgufValueTypeName]),
);
export function valueTypeName(id: number): GgufValueTypeName | undefined {
  return VALUE_TYPE_BY_ID.get(id);
}

/** Bytes of one fixed-size value; strings are a u64 length plus bytes (so at least 8). */
export const GGUF_SCALAR_SIZE: Readonly<Record<GgufScalarTypeName, number>> = {
  u8: 1,
  i8: 1,
  u16: 2,
  i16: 2,
  u32: 4,
  i32: 4,
  f32: 4,
  bool: 1,
  str: 8,
  u64: 8,
  i64: 8,
  f64: 8,
};

/** A metadata value: scalars carry their wire type so a round trip writes the same bytes. */
export type GgufScalar =
  | { readonly type: GgufNumberTypeName; readonly value: number }
  | { readonly type: GgufBigIntTypeName; readonly value: bigint }
  | { readonly type: "bool"; readonly value: boolean }
  | { readonly type: "str"; readonly value: string };

/**
 * An array value. `items` is null when the reader skipped an array longer than its keep limit;
 * `length` is always the count in the file.
 */
export type GgufArray =
  | {
      readonly type: "arr";
      readonly itemType: GgufNumberTypeName;
      readonly length: number;
      readonly items: readonly number[] | null;
    }
  | {
      readonly type: "arr";
      readonly itemType: GgufBigIntTypeName;
      readonly length: number;
      readonly items: readonly bigint[] | null;
    }
  | {
      readonly type: "arr";
      readonly itemType: "bool";
      readonly length: number;
      readonly items: readonly boolean[] | null;
    }
  | {
      readonly type: "arr";
      readonly itemType: "str";
      readonly length: number;
      readonly items: readonly string[] | null;
    };

export type GgufValue = GgufScalar | GgufArray;
export type GgufMetadata = ReadonlyMap<string, GgufValue>;

/** ggml tensor types: id, elements per block, bytes per block. Removed ids (4, 5, 31-33, 36-38) are absent. */
export const GGML_TYPES = {
  F32: { id: 0, blockSize: 1, typeSize: 4 },
  F16: { id: 1, blockSize: 1, typeSize: 2 },
  Q4_0: { id: 2, blockSize: 32, typeSize: 18 },
  Q4_1: { id: 3, blockSize: 32, typeSize: 20 },
  Q5_0: { id: 6, blockSize: 32, typeSize: 22 },
  Q5_1: { id: 7, blockSize: 32, typeSize: 24 },
  Q8_0: { id: 8, blockSize: 32, typeSize: 34 },
  Q8_1: { id: 9, blockSize: 32, typeSize: 36 },
  Q2_K: { id: 10, blockSize: 256, typeSize: 84 },
  Q3_K: { id: 11, blockSize: 256, typeSize: 110 },
  Q4_K: { id: 12, blockSize: 256, typeSize: 144 },
  Q5_K: { id: 13, blockSize: 256, typeSize: 176 },
  Q6_K: { id: 14, blockSize: 256, typeSize: 210 },
  Q8_K: { id: 15, blockSize: 256, typeSize: 292 },
  IQ2_XXS: { id: 16, blockSize: 256, typeSize: 66 },
  IQ2_XS: { id: 17, blockSize: 256, typeSize: 74 },
  IQ3_XXS: { id: 18, blockSize: 256, typeSize: 98 },
  IQ1_S: { id: 19, blockSize: 256, typeSize: 50 },
  IQ4_NL: { id: 20, blockSize: 32, typeSize: 18 },
  IQ3_S: { id: 21, blockSize: 256, typeSize: 110 },
  IQ2_S: { id: 22, blockSize: 256, typeSize: 82 },
  IQ4_XS: { id: 23, blockSize: 256, typeSize: 136 },
  I8: { id: 24, blockSize: 1, typeSize: 1 },
  I16: { id: 25, blockSize: 1, typeSize: 2 },
  I32: { id: 26, blockSize: 1, typeSize: 4 },
  I64: { id: 27, blockSize: 1, typeSize: 8 },
  F64: { id: 28, blockSize: 1, typeSize: 8 },
  IQ1_M: { id: 29, blockSize: 256, typeSize: 56 },
  BF16: { id: 30, blockSize: 1, typeSize: 2 },
  TQ1_0: { id: 34, blockSize: 256, typeSize: 54 },
  TQ2_0: { id: 35, blockSize: 256, typeSize: 66 },
  MXFP4: { id: 39, blockSize: 32, typeSize: 17 },
  NVFP4: { id: 40, blockSize: 64, typeSize: 36 },
  Q1_0: { id: 41, blockSize: 128, typeSize: 18 },
  Q2_0: { id: 42, blockSize: 64, typeSize: 18 },
} as const;
export type GgmlType = keyof typeof GGML_TYPES;

const GGML_TYPE_BY_ID = new Map<number, GgmlType>(
  Object.entries(GGML_TYPES).map(([name, t]) => [t.id, name as GgmlType]),
);
export function ggmlTypeName(id: number): GgmlType | undefined {
  return GGML_TYPE_BY_ID.get(id);
}

/** Bytes of a tensor of `type` with `dims` (ne order), or null when a row is not a whole number of blocks. */
export function tensorByteSize(type: GgmlType, dims: readonly number[]): bigint | null {
  const { blockSize, typeSize } = GGML_TYPES[type];
  const ne0 = dims[0] ?? 1;
  if (ne0 % blockSize !== 0) return null;
  let elements = 1n;
  for (const d of dims) elements *= BigInt(d);
  return (elements / BigInt(blockSize)) * BigInt(typeSize);
}

/** Rounds n up to a multiple of `alignment` (a power of two). */
export function padTo(n: number, alignment: number): number {
  return Math.ceil(n / alignment) * alignment;
}
