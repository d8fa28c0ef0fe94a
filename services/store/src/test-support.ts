// Helpers for this package's tests: temp directories disposed with `await using`, deterministic
// artifact files, a Disk whose free space is a fixed capacity minus what the tree really holds, and
// a logger that keeps its records.
import { lstat, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { createHash, randomBytes } from "node:crypto";
import { tmpdir } from "node:os";
import { dirname, join, resolve, sep } from "node:path";
import { Writable } from "node:stream";
import { createLogger, type Logger } from "@ic/log";
import { nodeDisk, type Disk } from "./disk.ts";

export interface TempDir extends AsyncDisposable {
  readonly path: string;
}

export async function tempDir(prefix: string): Promise<TempDir> {
  const path = await mkdtemp(join(tmpdir(), `${prefix}-`));
  return {
    path,
    async [Symbol.asyncDispose]() {
      await rm(path, { recursive: true, force: true });
    },
  };
}

/** Writes `bytes` random bytes and returns their sha256. */
export async function writeArtifact(path: string, bytes: number): Promise<string> {
  await mkdir(dirname(path), { recursive: true });
  const data = randomBytes(bytes);
  await writeFile(path, data);
  return createHash("sha256").update(data).digest("hex");
}

/** The sha256 of a file's content (hex). */
export async function sha256Of(path: string): Promise<string> {
  return createHash("sha256")
    .update(await readFile(path))
    .digest("hex");
}

/** Bytes held by the files under `dir`, counting each inode once (hardlinks are one allocation). */
export async function usedBytes(dir: string, seen = new Set<string>()): Promise<number> {
  let total = 0;
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory()) total += await usedBytes(p, seen);
    else if (e.isFile()) {
      const s = await lstat(p);
      const key = `${s.dev}:${s.ino}`;
      if (!seen.has(key)) {
        seen.add(key);
        total += s.size;
      }
    }
  }
  return total;
}

/**
 * A fake Disk: each listed root is its own volume of `capacity` bytes whose free space is the capacity
 * minus the bytes really stored below it. Filesystem identity comes from the real disk.
 */
export function budgetDisk(volumes: Record<string, number>): Disk {
  const roots = Object.entries(volumes).map(([p, c]) => [resolve(p), c] as const);
  return {
    async space(path) {
      const abs = resolve(path);
      const hit = roots.find(([r]) => abs === r || abs.startsWith(r + sep));
      if (!hit) return nodeDisk.space(path);
      const used = await usedBytes(hit[0]);
      return { freeBytes: Math.max(0, hit[1] - used), totalBytes: hit[1] };
    },
    sameFilesystem: nodeDisk.sameFilesystem,
  };
}

/** A logger that keeps every record (JSON-parsed) for a test to read; `messages(level)` filters. */
export function collectingLogger(): {
  readonly log: Logger;
  readonly records: Record<string, unknown>[];
  messages(level?: "debug" | "info" | "warn" | "error"): string[];
} {
  const records: Record<string, unknown>[] = [];
  const destination = new Writable({
    write(chunk: Buffer | string, _enc, cb) {
      for (const line of chunk.toString().split("\n"))
        if (line.trim()) records.push(JSON.parse(line) as Record<string, unknown>);
      cb();
    },
  });
  const log = createLogger({ enabled: true, level: "debug", destination, tail: null });
  const LEVELS = { debug: 20, info: 30, warn: 40, error: 50 } as const;
  return {
    log,
    records,
    messages: (level) =>
      records.filter((r) => !level || r.level === LEVELS[level]).map((r) => String(r.msg)),
  };
}
