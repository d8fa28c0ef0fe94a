// File mechanics of the ring: reading lines backwards from an offset, repairing a torn last line,
// splitting the active file at the Nth-last line into a gzip archive and a kept part, listing archives.
import { createReadStream, createWriteStream } from "node:fs";
import type { FileHandle } from "node:fs/promises";
import { open, readdir, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { constants as zlib, createGunzip, createGzip } from "node:zlib";
import type { ArchiveFile } from "./policy.ts";

export const ACTIVE_FILE = "events.jsonl";
export const ARCHIVE_RE = /^archive-[0-9TZ-]+\.jsonl(\.gz)?$/;
const NL = 0x0a;
const CHUNK = 64 * 1024;

async function readAt(fh: FileHandle, buf: Buffer, position: number): Promise<void> {
  let off = 0;
  while (off < buf.length) {
    const { bytesRead } = await fh.read(buf, off, buf.length - off, position + off);
    if (bytesRead === 0) throw new Error(`unexpected end of file at ${position + off}`);
    off += bytesRead;
  }
}

/** Lines of `fh` in [0, end), last first, without their newline; empty lines are skipped. */
export async function* linesBackward(
  fh: FileHandle,
  end: number,
  chunk = CHUNK,
): AsyncGenerator<string> {
  let pos = end;
  let carry = Buffer.alloc(0);
  while (pos > 0) {
    const start = Math.max(0, pos - chunk);
    const buf = Buffer.allocUnsafe(pos - start);
    await readAt(fh, buf, start);
    pos = start;
    const data = carry.length > 0 ? Buffer.concat([buf, carry]) : buf;
    let stop = data.length;
    while (stop > 0) {
      const nl = data.lastIndexOf(NL, stop - 1);
      if (nl < 0) break;
      if (stop > nl + 1) yield data.toString("utf8", nl + 1, stop);
      stop = nl;
    }
    carry = data.subarray(0, stop);
  }
  if (carry.length > 0) yield carry.toString("utf8");
}

/** Length the file should have so it ends with a complete line: after the last newline (or 0). */
export async function completeLength(fh: FileHandle, size: number): Promise<number> {
  let pos = size;
  while (pos > 0) {
    const start = Math.max(0, pos - CHUNK);
    const buf = Buffer.allocUnsafe(pos - start);
    await readAt(fh, buf, start);
    const nl = buf.lastIndexOf(NL);
    if (nl >= 0) return start + nl + 1;
    pos = start;
  }
  return 0;
}

/**
 * Scans [0, size) once and returns the offset where the last `keep` lines start, or null when the
 * file holds `keep` lines or fewer. Only the last `keep` line starts are held in memory.
 */
export async function cutOffset(path: string, size: number, keep: number): Promise<number | null> {
  const starts = new Float64Array(keep);
  let lines = 0;
  let lineStart = 0;
  let base = 0;
  const stream = createReadStream(path, { start: 0, end: size - 1, highWaterMark: 1024 * 1024 });
  for await (const chunk of stream as AsyncIterable<Buffer>) {
    let i = chunk.indexOf(NL);
    while (i >= 0) {
      starts[lines % keep] = lineStart;
      lines++;
      lineStart = base + i + 1;
      i = chunk.indexOf(NL, i + 1);
    }
    base += chunk.length;
  }
  if (lines <= keep) return null;
  return starts[lines % keep] ?? null;
}

async function syncFile(path: string): Promise<void> {
  const fh = await open(path, "r+");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** Bytes [start, end) of a file. */
export interface ByteRange {
  start: number;
  end: number;
}

/** Copies [start, end) of `src` to `dest` (gzipped when asked) through `dest.tmp`, fsynced, then renamed. */
export async function copyRangeAtomic(
  src: string,
  { start, end }: ByteRange,
  dest: string,
  gzip: boolean,
): Promise<void> {
  const tmp = `${dest}.tmp`;
  try {
    const input =
      end > start
        ? createReadStream(src, { start, end: end - 1, highWaterMark: 1024 * 1024 })
        : Readable.from([]);
    const output = createWriteStream(tmp);
    if (gzip) await pipeline(input, createGzip({ level: zlib.Z_BEST_SPEED }), output);
    else await pipeline(input, output);
    await syncFile(tmp);
    await rename(tmp, dest);
  } catch (err) {
    await rm(tmp, { force: true }).catch(() => undefined);
    throw err;
  }
}

/**
 * `archive-<UTC yyyymmddThhmmssmmmZ>-<first seq, 12 digits>.jsonl.gz`, unique among `taken`; names
 * sort chronologically even when the clock does not move between two compactions.
 */
export function archiveName(now: number, firstSeq: number, taken: ReadonlySet<string>): string {
  const stamp = new Date(now).toISOString().replace(/[-:.]/g, "");
  const seq = String(Math.max(0, Math.floor(firstSeq))).padStart(12, "0");
  for (let n = 0; ; n++) {
    const name = `archive-${stamp}-${seq}${n === 0 ? "" : `-${n}`}.jsonl.gz`;
    if (!taken.has(name)) return name;
  }
}

/** The first line of a file (up to 1 MiB), or null. */
export async function firstLine(path: string): Promise<string | null> {
  const fh = await open(path, "r");
  try {
    const buf = Buffer.allocUnsafe(1024 * 1024);
    const { bytesRead } = await fh.read(buf, 0, buf.length, 0);
    const nl = buf.subarray(0, bytesRead).indexOf(NL);
    return nl < 0 ? null : buf.toString("utf8", 0, nl);
  } finally {
    await fh.close();
  }
}

export async function listArchives(dir: string): Promise<ArchiveFile[]> {
  const names = (await readdir(dir)).filter((n) => ARCHIVE_RE.test(n));
  const out: ArchiveFile[] = [];
  for (const name of names) {
    try {
      const s = await stat(join(dir, name));
      out.push({ name, bytes: s.size, mtime: s.mtimeMs });
    } catch {
      // Deleted between readdir and stat.
    }
  }
  return out;
}

/** Removes leftovers of an interrupted compaction (`*.tmp`). */
export async function removeTemps(dir: string): Promise<string[]> {
  const temps = (await readdir(dir)).filter((n) => n.endsWith(".tmp"));
  for (const n of temps) await rm(join(dir, n), { force: true });
  return temps;
}

/** Last line of an archive (gzipped or plain) that `accept` takes; for seq recovery when the active file is gone. */
export async function lastLineOfArchive(
  path: string,
  accept: (line: string) => boolean,
): Promise<string | null> {
  const input = createReadStream(path);
  let source: NodeJS.ReadableStream = input;
  let piped: Promise<void> = Promise.resolve();
  if (path.endsWith(".gz")) {
    const gunzip = createGunzip();
    piped = pipeline(input, gunzip);
    source = gunzip;
  }
  let last: string | null = null;
  const scan = async (): Promise<void> => {
    const lines = createInterface({ input: source, crlfDelay: Infinity });
    for await (const line of lines) if (line && accept(line)) last = line;
  };
  // Both settle or reject together, so a corrupt archive rejects once and never dangles.
  await Promise.all([scan(), piped]);
  return last;
}
