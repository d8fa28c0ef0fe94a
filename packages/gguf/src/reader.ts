// Reads a GGUF file's header (metadata and tensor infos) through a file handle, never the tensor data.
// Every length in the file is checked against the bytes left and against configurable limits, so a
// corrupt or hostile file fails with a typed GgufError instead of a huge allocation; multi-GB files cost
// only their header bytes.
import { open, type FileHandle } from "node:fs/promises";
import { GgufError } from "./errors.ts";
import { modelFacts, type ModelFacts } from "./facts.ts";
import {
  GGML_MAX_DIMS,
  GGML_MAX_NAME_BYTES,
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_SCALAR_SIZE,
  GGUF_VERSION,
  ggmlTypeName,
  padTo,
  tensorByteSize,
  valueTypeName,
  type GgmlType,
  type GgufArray,
  type GgufMetadata,
  type GgufScalar,
  type GgufScalarTypeName,
  type GgufValue,
} from "./types.ts";

export interface GgufTensorInfo {
  readonly name: string;
  /** Element counts in ggml order (ne[0] is the contiguous dimension). */
  readonly dims: readonly number[];
  readonly ggmlType: GgmlType;
  readonly ggmlTypeId: number;
  /** Absolute byte offset of the tensor's data in the file. */
  readonly offset: number;
  /** Offset relative to the start of the data section, as stored in the file. */
  readonly relativeOffset: number;
  readonly byteSize: number;
}

export interface GgufHeader {
  readonly path: string;
  readonly version: number;
  readonly alignment: number;
  readonly metadata: GgufMetadata;
  readonly tensors: readonly GgufTensorInfo[];
  /** Absolute offset of the data section (end of header, padded to the alignment). */
  readonly dataOffset: number;
  readonly fileBytes: number;
  readonly facts: ModelFacts;
}

export interface ReadGgufOptions {
  /** Largest header (metadata + tensor infos) accepted. Default 256 MiB. */
  readonly maxHeaderBytes?: number;
  /** Longest single string (a key, a value, a tensor name). Default 32 MiB. */
  readonly maxStringBytes?: number;
  /** Most elements of one metadata array. Default 16 Mi. */
  readonly maxArrayLength?: number;
  /** Arrays longer than this are skipped (items: null, length kept). Default 1 Mi. */
  readonly keepArrayItemsUpTo?: number;
  /** Most metadata pairs. Default 65 536. */
  readonly maxKeys?: number;
  /** Most tensors. Default 1 Mi. */
  readonly maxTensors?: number;
}

const DEFAULTS: Required<ReadGgufOptions> = {
  maxHeaderBytes: 256 * 1024 * 1024,
  maxStringBytes: 32 * 1024 * 1024,
  maxArrayLength: 16 * 1024 * 1024,
  keepArrayItemsUpTo: 1024 * 1024,
  maxKeys: 65_536,
  maxTensors: 1024 * 1024,
};

const CHUNK_BYTES = 1024 * 1024;
const utf8 = new TextDecoder("utf-8", { fatal: false });

/** Sequential little-endian reader over a file handle with one growable buffer. */
class HeaderCursor {
  private buf: Buffer = Buffer.alloc(CHUNK_BYTES);
  private start = 0; // buffer index of the next unread byte
  private end = 0; // buffer index one past the last valid byte
  private filePos = 0; // file offset of buf[end]

  constructor(
    private readonly fh: FileHandle,
    readonly fileBytes: number,
    private readonly path: string,
    private readonly maxHeaderBytes: number,
  ) {}

  /** File offset of the next unread byte. */
  get position(): number {
    return this.filePos - (this.end - this.start);
  }

  get remaining(): number {
    return this.fileBytes - this.position;
  }

  /** Makes n bytes available in the buffer, or fails with `truncated` / `limit_exceeded`. */
  async need(n: number, what: string): Promise<void> {
    if (this.position + n > this.maxHeaderBytes) {
      throw new GgufError(
        "limit_exceeded",
        `header exceeds ${this.maxHeaderBytes} bytes while reading ${what}`,
        { path: this.path },
      );
    }
    if (this.end - this.start >= n) return;
    if (n > this.remaining) {
      throw new GgufError(
        "truncated",
        `file ends inside ${what} (needs ${n} bytes at offset ${this.position}, ${this.remaining} left)`,
        { path: this.path },
      );
    }
    const have = this.end - this.start;
    const want = Math.max(n, Math.min(CHUNK_BYTES, this.remaining));
    if (want > this.buf.length) {
      const bigger = Buffer.alloc(want);
      this.buf.copy(bigger, 0, this.start, this.end);
      this.buf = bigger;
    } else {
      this.buf.copy(this.buf, 0, this.start, this.end);
    }
    this.start = 0;
    this.end = have;
    while (this.end < n) {
      let bytesRead: number;
      try {
        ({ bytesRead } = await this.fh.read(
          this.buf,
          this.end,
          Math.min(this.buf.length - this.end, this.fileBytes - this.filePos),
          this.filePos,
        ));
      } catch (cause) {
        throw new GgufError("io", `read failed at offset ${this.filePos}`, {
          path: this.path,
          cause,
        });
      }
      if (bytesRead === 0) {
        throw new GgufError("truncated", `file shrank while reading ${what}`, { path: this.path });
      }
      this.end += bytesRead;
      this.filePos += bytesRead;
    }
  }

  /** Skips n bytes without keeping them. */
  async skip(n: number, what: string): Promise<void> {
    if (this.position + n > this.maxHeaderBytes) {
      throw new GgufError(
        "limit_exceeded",
        `header exceeds ${this.maxHeaderBytes} bytes while reading ${what}`,
        { path: this.path },
      );
    }
    if (n > this.remaining) {
      throw new GgufError("truncated", `file ends inside ${what}`, { path: this.path });
    }
    const buffered = this.end - this.start;
    if (n <= buffered) {
      this.start += n;
      return;
    }
    this.filePos += n - buffered;
    this.start = 0;
    this.end = 0;
  }

  // The synchronous getters below require a preceding need() covering them.
  u8(): number {
    return this.buf.readUInt8(this.start++);
  }
  i8(): number {
    return this.buf.readInt8(this.start++);
  }
  u16(): number {
    const v = this.buf.readUInt16LE(this.start);
    this.start += 2;
    return v;
  }
  i16(): number {
    const v = this.buf.readInt16LE(this.start);
    this.start += 2;
    return v;
  }
  u32(): number {
    const v = this.buf.readUInt32LE(this.start);
    this.start += 4;
    return v;
  }
  i32(): number {
    const v = this.buf.readInt32LE(this.start);
    this.start += 4;
    return v;
  }
  f32(): number {
    const v = this.buf.readFloatLE(this.start);
    this.start += 4;
    return v;
  }
  f64(): number {
    const v = this.buf.readDoubleLE(this.start);
    this.start += 8;
    return v;
  }
  u64(): bigint {
    const v = this.buf.readBigUInt64LE(this.start);
    this.start += 8;
    return v;
  }
  i64(): bigint {
    const v = this.buf.readBigInt64LE(this.start);
    this.start += 8;
    return v;
  }
  utf8(n: number): string {
    const s = utf8.decode(this.buf.subarray(this.start, this.start + n));
    this.start += n;
    return s;
  }
}

class HeaderParser {
  private readonly opts: Required<ReadGgufOptions>;
  constructor(
    private readonly c: HeaderCursor,
    private readonly path: string,
    options: ReadGgufOptions,
  ) {
    this.opts = { ...DEFAULTS, ...options };
  }

  private fail(
    code: "invalid_metadata" | "invalid_tensor" | "limit_exceeded",
    message: string,
  ): never {
    throw new GgufError(code, message, { path: this.path });
  }

  /** A u64 count that must fit in `limit` and in the bytes left given `minItemBytes` per item. */
  private async count(what: string, limit: number, minItemBytes: number): Promise<number> {
    await this.c.need(8, what);
    const n = this.c.u64();
    if (n > BigInt(limit))
      this.fail("limit_exceeded", `${what} is ${n}, above the limit of ${limit}`);
    const count = Number(n);
    if (count * minItemBytes > this.c.remaining) {
      throw new GgufError(
        "truncated",
        `${what} is ${count} but only ${this.c.remaining} bytes are left`,
        { path: this.path },
      );
    }
    return count;
  }

  private async string(what: string): Promise<string> {
    const n = await this.count(`length of ${what}`, this.opts.maxStringBytes, 1);
    await this.c.need(n, what);
    return this.c.utf8(n);
  }

  private async skipString(what: string): Promise<void> {
    const n = await this.count(`length of ${what}`, this.opts.maxStringBytes, 1);
    await this.c.skip(n, what);
  }

  async header(): Promise<{ version: number; nTensors: number; nKv: number }> {
    await this.c.need(4, "magic");
    const magic = this.c.u32();
    if (magic !== GGUF_MAGIC) {
      throw new GgufError(
        "bad_magic",
        `not a GGUF file (magic 0x${magic.toString(16).padStart(8, "0")})`,
        { path: this.path },
      );
    }
    await this.c.need(4, "version");
    const version = this.c.u32();
    if (version === 0 || (version & 0xffff) === 0) {
      throw new GgufError("unsupported_version", `GGUF version ${version} (a big-endian file?)`, {
        path: this.path,
      });
    }
    if (version < 2 || version > GGUF_VERSION) {
      throw new GgufError("unsupported_version", `GGUF version ${version}; supported are 2 and 3`, {
        path: this.path,
      });
    }
    // Minimal encodings: a tensor info is name length(8) + n_dims(4) + type(4) + offset(8);
    // a kv pair is key length(8) + 1 key byte + type(4) + 1 value byte.
    const nTensors = await this.count("tensor count", this.opts.maxTensors, 24);
    const nKv = await this.count("metadata count", this.opts.maxKeys, 14);
    return { version, nTensors, nKv };
  }

  /** Reads one fixed-size value; the caller has made its bytes available. */
  private fixed(type: Exclude<GgufScalarTypeName, "str">): number | bigint | boolean {
    switch (type) {
      case "u8":
        return this.c.u8();
      case "i8":
        return this.c.i8();
      case "u16":
        return this.c.u16();
      case "i16":
        return this.c.i16();
      case "u32":
        return this.c.u32();
      case "i32":
        return this.c.i32();
      case "f32":
        return this.c.f32();
      case "f64":
        return this.c.f64();
      case "u64":
        return this.c.u64();
      case "i64":
        return this.c.i64();
      case "bool":
        return this.c.i8() !== 0;
    }
  }

  private async scalar(type: GgufScalarTypeName, what: string): Promise<GgufScalar> {
    if (type === "str") return { type, value: await this.string(what) };
    await this.c.need(GGUF_SCALAR_SIZE[type], what);
    // fixed() returns the JS type that matches `type` (bigint for 64-bit ints, boolean for bool).
    return { type, value: this.fixed(type) } as GgufScalar;
  }

  private async array(key: string): Promise<GgufArray> {
    await this.c.need(4, `item type of ${key}`);
    const typeId = this.c.i32();
    const itemType = valueTypeName(typeId);
    if (itemType === undefined || itemType === "arr") {
      this.fail("invalid_metadata", `key '${key}' is an array of invalid type ${typeId}`);
    }
    const length = await this.count(
      `array length of ${key}`,
      this.opts.maxArrayLength,
      GGUF_SCALAR_SIZE[itemType],
    );
    const keep = length <= this.opts.keepArrayItemsUpTo;
    if (itemType === "str") {
      const items: string[] = [];
      for (let i = 0; i < length; i++) {
        if (keep) items.push(await this.string(`${key}[${i}]`));
        else await this.skipString(`${key}[${i}]`);
      }
      return { type: "arr", itemType, length, items: keep ? items : null };
    }
    const size = GGUF_SCALAR_SIZE[itemType];
    if (!keep) {
      await this.c.skip(length * size, key);
      // The union needs a concrete member; itemType is widened back by the cast.
      return { type: "arr", itemType, length, items: null } as GgufArray;
    }
    const values: (number | bigint | boolean)[] = [];
    // Read in slices so a long numeric array never needs one buffer of its full size.
    const perSlice = Math.max(1, Math.floor(CHUNK_BYTES / size));
    for (let i = 0; i < length; i += perSlice) {
      const n = Math.min(perSlice, length - i);
      await this.c.need(n * size, key);
      for (let j = 0; j < n; j++) values.push(this.fixed(itemType));
    }
    return { type: "arr", itemType, length, items: values } as GgufArray;
  }

  async metadata(nKv: number): Promise<Map<string, GgufValue>> {
    const metadata = new Map<string, GgufValue>();
    for (let i = 0; i < nKv; i++) {
      const key = await this.string(`key ${i}`);
      if (key.length === 0) this.fail("invalid_metadata", `key ${i} is empty`);
      if (metadata.has(key)) this.fail("invalid_metadata", `duplicate key '${key}'`);
      await this.c.need(4, `type of ${key}`);
      const typeId = this.c.i32();
      const type = valueTypeName(typeId);
      if (type === undefined)
        this.fail("invalid_metadata", `key '${key}' has invalid type ${typeId}`);
      metadata.set(key, type === "arr" ? await this.array(key) : await this.scalar(type, key));
    }
    return metadata;
  }

  async tensorInfos(n: number): Promise<Omit<GgufTensorInfo, "offset">[]> {
    const infos: Omit<GgufTensorInfo, "offset">[] = [];
    const names = new Set<string>();
    for (let i = 0; i < n; i++) {
      const name = await this.string(`name of tensor ${i}`);
      if (Buffer.byteLength(name) > GGML_MAX_NAME_BYTES) {
        this.fail("invalid_tensor", `tensor ${i} name is longer than ${GGML_MAX_NAME_BYTES} bytes`);
      }
      if (names.has(name)) this.fail("invalid_tensor", `duplicate tensor name '${name}'`);
      names.add(name);
      await this.c.need(4, `dims of ${name}`);
      const nDims = this.c.u32();
      if (nDims > GGML_MAX_DIMS)
        this.fail(
          "invalid_tensor",
          `tensor '${name}' has ${nDims} dimensions (max ${GGML_MAX_DIMS})`,
        );
      await this.c.need(nDims * 8 + 4 + 8, `info of ${name}`);
      const dims: number[] = [];
      for (let d = 0; d < nDims; d++) {
        const ne = this.c.i64();
        if (ne < 0n)
          this.fail("invalid_tensor", `tensor '${name}' dimension ${d} is negative (${ne})`);
        if (ne > BigInt(Number.MAX_SAFE_INTEGER))
          this.fail("invalid_tensor", `tensor '${name}' dimension ${d} is too large (${ne})`);
        dims.push(Number(ne));
      }
      const typeId = this.c.i32();
      const ggmlType = ggmlTypeName(typeId);
      if (ggmlType === undefined)
        this.fail("invalid_tensor", `tensor '${name}' has unknown ggml type ${typeId}`);
      const size = tensorByteSize(ggmlType, dims);
      if (size === null)
        this.fail(
          "invalid_tensor",
          `tensor '${name}' rows are not a whole number of ${ggmlType} blocks`,
        );
      if (size > BigInt(Number.MAX_SAFE_INTEGER))
        this.fail("invalid_tensor", `tensor '${name}' is too large (${size} bytes)`);
      const rel = this.c.u64();
      if (rel > BigInt(Number.MAX_SAFE_INTEGER))
        this.fail("invalid_tensor", `tensor '${name}' offset is too large (${rel})`);
      infos.push({
        name,
        dims,
        ggmlType,
        ggmlTypeId: typeId,
        relativeOffset: Number(rel),
        byteSize: Number(size),
      });
    }
    return infos;
  }
}

function alignmentOf(metadata: GgufMetadata, path: string): number {
  const v = metadata.get("general.alignment");
  if (v === undefined) return GGUF_DEFAULT_ALIGNMENT;
  if (v.type !== "u32") {
    throw new GgufError("invalid_metadata", `general.alignment must be u32, is ${v.type}`, {
      path,
    });
  }
  if (v.value === 0 || (v.value & (v.value - 1)) !== 0) {
    throw new GgufError("invalid_metadata", `general.alignment ${v.value} is not a power of two`, {
      path,
    });
  }
  return v.value;
}

/** Reads the header of the GGUF file at `path`; tensor data is never read. */
export async function readGgufHeader(
  path: string,
  options: ReadGgufOptions = {},
): Promise<GgufHeader> {
  let fh: FileHandle;
  try {
    fh = await open(path, "r");
  } catch (cause) {
    throw new GgufError("io", `cannot open: ${(cause as Error).message}`, { path, cause });
  }
  try {
    let fileBytes: number;
    try {
      fileBytes = (await fh.stat()).size;
    } catch (cause) {
      throw new GgufError("io", "cannot stat", { path, cause });
    }
    const cursor = new HeaderCursor(
      fh,
      fileBytes,
      path,
      options.maxHeaderBytes ?? DEFAULTS.maxHeaderBytes,
    );
    const parser = new HeaderParser(cursor, path, options);
    const { version, nTensors, nKv } = await parser.header();
    const metadata = await parser.metadata(nKv);
    const alignment = alignmentOf(metadata, path);
    const infos = await parser.tensorInfos(nTensors);
    const dataOffset = nTensors > 0 ? padTo(cursor.position, alignment) : cursor.position;
    const tensors = infos.map((t): GgufTensorInfo => {
      if (t.relativeOffset % alignment !== 0) {
        throw new GgufError(
          "invalid_tensor",
          `tensor '${t.name}' offset ${t.relativeOffset} is not a multiple of ${alignment}`,
          { path },
        );
      }
      const offset = dataOffset + t.relativeOffset;
      if (offset + t.byteSize > fileBytes) {
        throw new GgufError(
          "truncated",
          `tensor '${t.name}' data (${t.byteSize} bytes at ${offset}) extends past the end of the file (${fileBytes} bytes)`,
          { path },
        );
      }
      return { ...t, offset };
    });
    const header = { path, version, alignment, metadata, tensors, dataOffset, fileBytes };
    return { ...header, facts: modelFacts(header) };
  } finally {
    await fh.close();
  }
}
