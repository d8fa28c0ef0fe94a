// Records of the children this node spawned (one JSON file per live child) and the sweep that kills
// what a previous run left behind when it was killed before it could stop them (kill -9, OOM killer).
// Invariants: a record is written right after spawn with the child's /proc start time and removed
// once the child is reaped; the sweep kills only a process whose pid AND start time (and boot) match
// its record -- a recycled pid is never killed -- and never touches the records of a live owner (a
// node still running, this one included); every record it judges is removed, except one whose
// process survived SIGKILL, which stays for the next sweep. On systems without /proc nothing is
// recorded and the sweep finds nothing.
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";

/** The directory of child records inside a node's runtime directory. */
export function childrenDir(runtimeDir: string): string {
  return join(runtimeDir, "children");
}

/** A process, identified beyond its pid: start time in clock ticks after boot (/proc stat field 22). */
const ProcessIdentity = z.object({
  pid: z.number().int().positive(),
  start_time: z.number().int().nonnegative(),
});
export type ProcessIdentity = z.infer<typeof ProcessIdentity>;

const ChildRecordSchema = ProcessIdentity.extend({
  /** The kernel boot the start time belongs to. */
  boot_id: z.string(),
  /** The program, as given to spawn (for the sweep's report). */
  argv0: z.string(),
  /** The node process that spawned it. */
  owner: ProcessIdentity,
});
export type ChildRecord = z.infer<typeof ChildRecordSchema>;

/** Pure: state (field 3) and start time (field 22) from the text of /proc/<pid>/stat. */
export function parseProcStat(text: string): { state: string; startTime: number } | undefined {
  // Field 2 (comm) is parenthesised and may itself hold spaces and parentheses: skip past the last ')'.
  const close = text.lastIndexOf(")");
  if (close < 0) return undefined;
  const fields = text
    .slice(close + 1)
    .trim()
    .split(/\s+/);
  const state = fields[0];
  const start = Number(fields[22 - 3]);
  if (!state || !Number.isSafeInteger(start)) return undefined;
  return { state, startTime: start };
}

/** State and start time of a process, or undefined when there is none (or no /proc). */
export function procStat(pid: number): { state: string; startTime: number } | undefined {
  try {
    return parseProcStat(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return undefined;
  }
}

/** Whether this very process (pid and start time) is running; a zombie counts as gone. */
export function isRunning(p: ProcessIdentity): boolean {
  const s = procStat(p.pid);
  return s !== undefined && s.state !== "Z" && s.startTime === p.start_time;
}

let cachedBootId: string | undefined;
function bootId(): string {
  if (cachedBootId === undefined) {
    try {
      cachedBootId = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
    } catch {
      cachedBootId = "";
    }
  }
  return cachedBootId;
}

let self: ProcessIdentity | undefined;
function selfIdentity(): ProcessIdentity | undefined {
  if (!self) {
    const s = procStat(process.pid);
    if (s) self = { pid: process.pid, start_time: s.startTime };
  }
  return self;
}

/**
 * Records a just-spawned child (call it before yielding to the event loop: the pid cannot have been
 * reaped yet, so its start time is its own). Returns false when nothing could be recorded.
 */
export function recordChild(dir: string, pid: number, argv0: string): boolean {
  const st = procStat(pid);
  const owner = selfIdentity();
  if (!st || !owner) return false;
  writeChildRecord(dir, { pid, start_time: st.startTime, boot_id: bootId(), argv0, owner });
  return true;
}

/** Writes a record atomically (temp file, then rename). */
export function writeChildRecord(dir: string, rec: ChildRecord): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const file = join(dir, `${rec.pid}.json`);
  writeFileSync(`${file}.tmp`, `${JSON.stringify(rec)}\n`, { mode: 0o600 });
  renameSync(`${file}.tmp`, file);
}

export function removeChildRecord(dir: string, pid: number): void {
  rmSync(join(dir, `${pid}.json`), { force: true });
}

export interface SweepReport {
  /** Orphans that were still running and have been killed. */
  readonly killed: ChildRecord[];
  /** Records of processes already gone, or whose pid now belongs to another process. */
  readonly stale: ChildRecord[];
  /** Records of a live owner's children, left alone. */
  readonly kept: ChildRecord[];
  /** Orphans still running after SIGKILL and the wait; their records stay. */
  readonly survived: ChildRecord[];
  /** Files that were not valid records (removed). */
  readonly invalid: string[];
}

/**
 * Kills (SIGKILL) the recorded children of dead owners that are still running as recorded, waits up
 * to `waitMs` for them to die, and removes the records. Call it at node start, before spawning.
 */
export async function sweepOrphans(
  dir: string,
  opts: { waitMs?: number } = {},
): Promise<SweepReport> {
  const report: SweepReport = { killed: [], stale: [], kept: [], survived: [], invalid: [] };
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return report; // no directory: nothing was ever recorded here
  }
  const victims: ChildRecord[] = [];
  for (const name of names) {
    const file = join(dir, name);
    if (name.endsWith(".tmp")) {
      rmSync(file, { force: true });
      continue;
    }
    if (!/^\d+\.json$/.test(name)) continue;
    let rec: ChildRecord | undefined;
    try {
      const parsed = ChildRecordSchema.safeParse(JSON.parse(readFileSync(file, "utf8")));
      if (parsed.success) rec = parsed.data;
    } catch {
      rec = undefined;
    }
    if (!rec) {
      report.invalid.push(name);
      rmSync(file, { force: true });
      continue;
    }
    if (rec.boot_id === bootId() && isRunning(rec.owner)) {
      report.kept.push(rec);
      continue;
    }
    if (rec.boot_id === bootId() && isRunning(rec)) {
      victims.push(rec);
      try {
        process.kill(rec.pid, "SIGKILL");
      } catch {
        // gone in the meantime
      }
      continue;
    }
    report.stale.push(rec);
    rmSync(file, { force: true });
  }
  const deadline = Date.now() + (opts.waitMs ?? 2000);
  while (victims.some(isRunning) && Date.now() < deadline)
    await new Promise((r) => setTimeout(r, 20));
  for (const rec of victims) {
    if (isRunning(rec)) report.survived.push(rec);
    else {
      report.killed.push(rec);
      removeChildRecord(dir, rec.pid);
    }
  }
  return report;
}
