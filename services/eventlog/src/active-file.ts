// The active file of the event log, read from the disk: its size, the repair of a torn last line
// after a crash (and the last seq found there or in the newest readable archive), and the backward
// read of the most recent records a query asks for. The error helpers sort what a write hit.
import { open, stat, truncate as truncateFile } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "@ic/log";
import { EventRecordSchema, peekLine, type EventRecord } from "./record.ts";
import { completeLength, lastLineOfArchive, linesBackward, listArchives } from "./ring-file.ts";

const SPACE_ERRORS = new Set(["ENOSPC", "EDQUOT"]);

export function errCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/** The disk (or the quota) is full: the log degrades to counting-only instead of dropping. */
export function isSpaceError(err: unknown): boolean {
  return SPACE_ERRORS.has(errCode(err) ?? "");
}

/** Bytes in the file; 0 when there is none yet. */
export async function fileSize(path: string): Promise<number> {
  try {
    return (await stat(path)).size;
  } catch (err) {
    if (errCode(err) === "ENOENT") return 0;
    throw err;
  }
}

/**
 * Cuts a torn last line (crash mid-write) off the active file, then finds the last seq in it or,
 * when it holds none, in the archives. Answers the file's size after the cut and that seq (0: none).
 */
export async function recoverActive(
  activePath: string,
  dir: string,
  log: Logger,
): Promise<{ size: number; lastSeq: number }> {
  let size = await fileSize(activePath);
  let lastSeq = 0;
  if (size > 0) {
    const fh = await open(activePath, "r");
    try {
      const complete = await completeLength(fh, size);
      if (complete < size) {
        await truncateFile(activePath, complete);
        log.warn({ cut_bytes: size - complete }, "removed a torn last line from the event log");
        size = complete;
      }
      for await (const line of linesBackward(fh, size)) {
        const head = peekLine(line);
        if (head) {
          lastSeq = head.seq;
          break;
        }
      }
    } finally {
      await fh.close();
    }
  }
  if (lastSeq === 0) lastSeq = await lastSeqInArchives(dir, log);
  return { size, lastSeq };
}

/** The seq of the last record of the newest readable archive (0 when none has one). */
async function lastSeqInArchives(dir: string, log: Logger): Promise<number> {
  const archives = await listArchives(dir);
  archives.sort((a, b) => b.mtime - a.mtime || (a.name < b.name ? 1 : -1));
  for (const a of archives) {
    try {
      const line = await lastLineOfArchive(join(dir, a.name), (l) => peekLine(l) !== null);
      const head = line === null ? null : peekLine(line);
      if (head) return head.seq;
    } catch (err) {
      log.warn({ err, archive: a.name }, "unreadable event-log archive");
    }
  }
  return 0;
}

/** Whether a record of a query's answer: take it, skip it, or stop (everything older is out too). */
export type Match = (seq: number, type: string) => "take" | "skip" | "stop";

/** What a read wants: which records (`matches`), and at most how many (`limit`). */
export interface ReadWant {
  matches: Match;
  limit: number;
}

/**
 * Adds the active file's matching records to `out`, newest first, from byte `end` backwards, until
 * `out` holds `limit` records or a record is older than the query wants.
 */
export async function readBackward(
  activePath: string,
  end: number,
  { matches, limit }: ReadWant,
  out: EventRecord[],
): Promise<void> {
  const fh = await open(activePath, "r");
  try {
    for await (const line of linesBackward(fh, end)) {
      const head = peekLine(line);
      if (!head) continue;
      const m = matches(head.seq, head.type);
      if (m === "stop") break;
      if (m === "skip") continue;
      const parsed = EventRecordSchema.safeParse(head.value);
      if (!parsed.success) continue;
      out.push(parsed.data);
      if (out.length >= limit) break;
    }
  } finally {
    await fh.close();
  }
}
