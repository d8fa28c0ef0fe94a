// File mechanics of the ring with real temp files: backwards line reads across chunk borders
// (multi-byte text included), torn-tail detection, the cut offset, archive reads and names.
import { mkdtemp, open, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { statfsDisk } from "./disk.ts";
import {
  ARCHIVE_RE,
  archiveName,
  completeLength,
  cutOffset,
  lastLineOfArchive,
  linesBackward,
} from "./ring-file.ts";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "eventlog-ring-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function backwards(text: string, chunk: number, end?: number): Promise<string[]> {
  const path = join(dir, "f");
  await writeFile(path, text);
  const fh = await open(path, "r");
  try {
    const out: string[] = [];
    for await (const line of linesBackward(fh, end ?? Buffer.byteLength(text), chunk)) {
      out.push(line);
    }
    return out;
  } finally {
    await fh.close();
  }
}

describe("linesBackward", () => {
  it.each([1, 2, 3, 7, 64 * 1024])("yields lines last first with chunk size %i", async (chunk) => {
    const text = "alpha\nbeta\n\ngämma ✓\nδέλτα\n";
    expect(await backwards(text, chunk)).toEqual(["δέλτα", "gämma ✓", "beta", "alpha"]);
  });

  it("yields an unterminated last line and stops at the given end", async () => {
    expect(await backwards("a\nb\nc", 2)).toEqual(["c", "b", "a"]);
    expect(await backwards("a\nb\nc\n", 2, 4)).toEqual(["b", "a"]);
    expect(await backwards("", 4)).toEqual([]);
  });
});

describe("completeLength", () => {
  it.each([
    ["a\nb\n", 4],
    ["a\nb\npart", 4],
    ["no newline", 0],
    ["", 0],
  ])("%j keeps %i bytes", async (text, expected) => {
    const path = join(dir, "f");
    await writeFile(path, text);
    const fh = await open(path, "r");
    try {
      expect(await completeLength(fh, Buffer.byteLength(text))).toBe(expected);
    } finally {
      await fh.close();
    }
  });
});

describe("cutOffset", () => {
  it.each([
    [5, 2, 6],
    [5, 4, 2],
    [5, 5, null],
    [5, 9, null],
    [1, 1, null],
  ])("%i lines keeping %i cut at %s", async (lines, keep, expected) => {
    const text = Array.from({ length: lines }, (_, i) => `${i}`).join("\n") + "\n";
    const path = join(dir, "f");
    await writeFile(path, text);
    expect(await cutOffset(path, text.length, keep)).toBe(expected);
  });
});

describe("archives", () => {
  it("names sort chronologically and match the archive pattern", () => {
    const t = Date.UTC(2025, 0, 2, 3, 4, 5, 6);
    const a = archiveName(t, 99, new Set());
    expect(a).toBe("archive-20250102T030405006Z-000000000099.jsonl.gz");
    expect(archiveName(t, 99, new Set([a]))).toBe(
      "archive-20250102T030405006Z-000000000099-1.jsonl.gz",
    );
    expect(archiveName(t, 100, new Set()) > a).toBe(true);
    expect(archiveName(t + 1, 1, new Set()) > a).toBe(true);
    expect(ARCHIVE_RE.test(a)).toBe(true);
    expect(ARCHIVE_RE.test("events.jsonl")).toBe(false);
  });

  it("reads the last accepted line of a gzip archive and rejects a corrupt one", async () => {
    const good = join(dir, "good.jsonl.gz");
    await writeFile(good, gzipSync("1\n2\nx\n"));
    expect(await lastLineOfArchive(good, (l) => /^\d+$/.test(l))).toBe("2");
    const bad = join(dir, "bad.jsonl.gz");
    await writeFile(bad, Buffer.concat([gzipSync("1\n2\n").subarray(0, 12), Buffer.from("junk")]));
    await expect(lastLineOfArchive(bad, () => true)).rejects.toThrow();
  });
});

describe("statfsDisk", () => {
  it("reports the free bytes of a real directory", async () => {
    expect(await statfsDisk.freeBytes(dir)).toBeGreaterThan(0);
  });
});
