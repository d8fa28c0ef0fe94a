// Pieces of a file: the store host cuts every file into fixed-size pieces and lists each one's sha256
// in the manifest, so a copy can come from several sources at once (the store host and peers that
// hold it) and be verified piece by piece, on several cores. Also the bitmap of the pieces a copy
// holds, as peers exchange it and as a partial keeps it for resume.
import { open } from "node:fs/promises";
import { createHash } from "node:crypto";
import { MAX_PIECES_PER_FILE, pieceCount, type FilePieces } from "@ic/protocol";

/** The piece size for files up to 1 TiB (16 MiB); larger files get larger pieces. */
export const PIECE_BYTES = 16 * 1024 * 1024;

/** Piece size for a file: `base`, doubled until the file has at most MAX_PIECES_PER_FILE. */
export function pieceBytesFor(fileBytes: number, base = PIECE_BYTES): number {
  let p = base;
  while (pieceCount(fileBytes, p) > MAX_PIECES_PER_FILE) p *= 2;
  return p;
}

/** [start, end) of piece `i` of a file. */
export function pieceRange(fileBytes: number, pieceBytes: number, i: number): [number, number] {
  const start = i * pieceBytes;
  return [start, Math.min(fileBytes, start + pieceBytes)];
}

const READ_BYTES = 8 * 1024 * 1024;

/** How a hash is watched and stopped (the store host's hashing pool passes both). */
export interface HashOptions {
  /** Stops the read loop: the hash rejects with the signal's reason before its next read. */
  readonly signal?: AbortSignal | undefined;
  /** Called after each read (8 MiB at most) with the bytes it added. */
  readonly onProgress?: ((bytes: number) => void) | undefined;
  /** Awaited before each read: the pool holds a big hash here while smaller ones go first. */
  readonly checkpoint?: (() => Promise<void>) | undefined;
}

/** The sha256 of a whole file and of each of its pieces, in one read of the file. */
export async function hashFilePieces(
  path: string,
  fileBytes: number,
  pieceBytes: number,
  opts: HashOptions = {},
): Promise<{ sha256: string; pieces: FilePieces }> {
  const { signal, onProgress, checkpoint } = opts;
  signal?.throwIfAborted();
  const whole = createHash("sha256");
  const hashes: string[] = [];
  const fh = await open(path, "r");
  try {
    const buf = Buffer.allocUnsafe(Math.min(READ_BYTES, pieceBytes));
    for (let i = 0; i < pieceCount(fileBytes, pieceBytes); i++) {
      const [start, end] = pieceRange(fileBytes, pieceBytes, i);
      const piece = createHash("sha256");
      for (let pos = start; pos < end;) {
        if (checkpoint) await checkpoint();
        signal?.throwIfAborted();
        const { bytesRead } = await fh.read(buf, 0, Math.min(buf.length, end - pos), pos);
        if (bytesRead === 0) throw new Error(`${path} has fewer than ${fileBytes} bytes`);
        const v = buf.subarray(0, bytesRead);
        piece.update(v);
        whole.update(v);
        pos += bytesRead;
        onProgress?.(bytesRead);
      }
      hashes.push(piece.digest("hex"));
    }
  } finally {
    await fh.close();
  }
  return { sha256: whole.digest("hex"), pieces: { bytes: pieceBytes, sha256: hashes } };
}

/** A set of piece indices, as peers exchange it (base64) and a partial keeps it. */
export class PieceSet {
  private readonly bits: Uint8Array;
  private n = 0;

  constructor(readonly size: number) {
    this.bits = new Uint8Array(Math.ceil(size / 8));
  }

  /** Decodes base64 of a bitmap of `size` pieces; null when it does not have that length. */
  static fromBase64(text: string, size: number): PieceSet | null {
    const raw = Buffer.from(text, "base64");
    if (raw.length !== Math.ceil(size / 8)) return null;
    const s = new PieceSet(size);
    for (let i = 0; i < size; i++) if ((raw[i >> 3]! >> (i & 7)) & 1) s.add(i);
    return s;
  }

  get count(): number {
    return this.n;
  }

  get complete(): boolean {
    return this.n === this.size;
  }

  has(i: number): boolean {
    return i >= 0 && i < this.size && ((this.bits[i >> 3]! >> (i & 7)) & 1) === 1;
  }

  add(i: number): void {
    if (i < 0 || i >= this.size || this.has(i)) return;
    this.bits[i >> 3]! |= 1 << (i & 7);
    this.n++;
  }

  delete(i: number): void {
    if (!this.has(i)) return;
    this.bits[i >> 3]! &= ~(1 << (i & 7));
    this.n--;
  }

  /** True when every piece overlapping bytes [start, end] (inclusive) of the file is in the set. */
  covers(start: number, end: number, pieceBytes: number): boolean {
    for (let i = Math.floor(start / pieceBytes); i <= Math.floor(end / pieceBytes); i++)
      if (!this.has(i)) return false;
    return true;
  }

  toBase64(): string {
    return Buffer.from(this.bits).toString("base64");
  }
}
