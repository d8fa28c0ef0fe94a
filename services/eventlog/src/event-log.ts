// The bounded durable event log: indexed control events appended as JSON lines to a ring file,
// compacted into rotated gzip archives, degraded to counting-only when the disk runs low.
//
// Invariants:
// - append() is synchronous, never throws and never waits for I/O; records queue in memory and a
//   single serial lane (writes, compactions, reads) writes them in append order, gathered for up to
//   write_delay_ms so a busy cluster pays one write per batch, not one per event.
// - seq is assigned once a record is accepted for writing and strictly increases across restarts.
// - A compaction writes the archive before it replaces the active file, so a crash between the two
//   can duplicate records into an archive but never lose one.
// - In counting-only mode nothing is written: records are counted (total and per type) instead.
import { mkdir, unlink } from "node:fs/promises";
import { join } from "node:path";
import type { IndexedEvent } from "@ic/protocol";
import type { Logger } from "@ic/log";
import { GiB, MiB, systemClock } from "@ic/protocol";
import type { Clock } from "@ic/protocol";
import type { AppendHandle, Disk, EventFiles } from "./disk.ts";
import { nodeFiles, statfsDisk } from "./disk.ts";
import type { Mode } from "./policy.ts";
import {
  nextMode,
  planArchiveRotation,
  planCompaction,
  resumeThreshold,
  shouldCheckDisk,
} from "./policy.ts";
import type { EventRecord } from "./record.ts";
import { encodeRecord, peekLine, toRecord } from "./record.ts";
import {
  ACTIVE_FILE,
  archiveName,
  copyRangeAtomic,
  cutOffset,
  firstLine,
  listArchives,
  removeTemps,
} from "./ring-file.ts";
import { errCode, fileSize, isSpaceError, readBackward, recoverActive } from "./active-file.ts";
import type { Match } from "./active-file.ts";
import {
  READ_LIMIT_DEFAULT,
  READ_LIMIT_MAX,
  type EventLogDeps,
  type EventLogState,
  type EventLogUsage,
  type ReadQuery,
} from "./options.ts";

const BATCH_MAX = 4096;

interface Pending {
  readonly record: EventRecord;
  readonly line: string;
}

/** A FIFO lane: one file operation at a time, in call order; a failure does not block the next one. */
class Lane {
  private tail: Promise<unknown> = Promise.resolve();
  run<T>(fn: () => Promise<T>): Promise<T> {
    const result = this.tail.then(fn, fn);
    this.tail = result.catch(() => undefined);
    return result;
  }
}

export class EventLog {
  private readonly log: Logger;
  private readonly disk: Disk;
  private readonly clock: Pick<Clock, "now">;
  private readonly files: EventFiles;
  private readonly dir: string;
  private readonly activePath: string;
  private readonly floorBytes: number;
  private readonly maxPending: number;
  private readonly lane = new Lane();

  private state: EventLogState = "idle";
  private starting: Promise<void> | null = null;
  private stopping: Promise<void> | null = null;
  private mode: Mode = "normal";
  private handle: AppendHandle | null = null;
  /** A failed write left bytes that could not be cut: start the next write on a fresh line. */
  private needsNewline = false;

  private early: IndexedEvent[] = [];
  private pending: Pending[] = [];
  private flushQueued = false;
  private flushTimer: NodeJS.Timeout | undefined;
  private lastSeq = 0;

  private appendsSinceCheck = 0;
  private checking: Promise<void> | null = null;
  private lastFreeCheck: { free_bytes: number; at: number } | null = null;

  private activeBytes = 0;
  private keptBytesAfterLast = 0;
  private compactNotBefore = 0;
  private archiveBytes = 0;
  private archiveFiles = 0;
  private written = 0;
  private countedOnly = 0;
  private countedByType: Record<string, number> = {};
  private dropped = 0;

  constructor(private readonly deps: EventLogDeps) {
    this.log = deps.logger.child({ component: "eventlog" });
    this.disk = deps.disk ?? statfsDisk;
    this.clock = deps.clock ?? systemClock;
    this.files = deps.files ?? nodeFiles;
    this.dir = deps.config.dir;
    this.activePath = join(this.dir, ACTIVE_FILE);
    this.floorBytes = deps.config.free_floor_gb * GiB;
    this.maxPending = deps.maxPending ?? 100_000;
  }

  get currentState(): EventLogState {
    return this.state;
  }

  get currentMode(): Mode {
    return this.mode;
  }

  /** Creates the directory, repairs a torn last line, recovers seq, checks free space. Idempotent. */
  start(): Promise<void> {
    this.starting ??= this.doStart();
    return this.starting;
  }

  /** Writes what is queued, closes the file. Idempotent; appends after stop are dropped. */
  stop(): Promise<void> {
    this.stopping ??= this.doStop();
    return this.stopping;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  /** Queues one indexed event; never throws, never waits. */
  append(e: IndexedEvent): void {
    try {
      if (this.state === "stopped") {
        this.dropped++;
        return;
      }
      if (this.state === "idle" || this.state === "starting") {
        this.early.push(e);
        if (this.early.length > this.maxPending) this.dropOldest(this.early);
        return;
      }
      this.appendsSinceCheck++;
      if (shouldCheckDisk(this.appendsSinceCheck, this.deps.config.check_every)) this.checkDisk();
      this.accept(e);
    } catch (err) {
      this.dropped++;
      this.log.error({ err }, "event log append failed");
    }
  }

  /** Resolves once every record appended before the call is written (or counted). */
  flush(): Promise<void> {
    if (this.state !== "running") return Promise.resolve();
    return this.lane.run(async () => {
      while (this.pending.length > 0) await this.writeBatch();
    });
  }

  /** The most recent matching records, newest last: unwritten ones from memory, then the active file. */
  async read(q: ReadQuery = {}): Promise<EventRecord[]> {
    const limit = Math.min(READ_LIMIT_MAX, Math.max(1, Math.floor(q.limit ?? READ_LIMIT_DEFAULT)));
    const after = q.after_seq;
    const matches: Match = (seq, type) =>
      after !== undefined && seq <= after
        ? "stop"
        : q.type !== undefined && type !== q.type
          ? "skip"
          : "take";
    return this.lane.run(async () => {
      const out: EventRecord[] = [];
      for (let i = this.pending.length - 1; i >= 0 && out.length < limit; i--) {
        const r = (this.pending[i] as Pending).record;
        const m = matches(r.seq, r.type);
        if (m === "stop") return out.reverse();
        if (m === "take") out.push(r);
      }
      if (out.length >= limit) return out.reverse();
      const end =
        this.state === "running" || this.state === "stopping"
          ? this.activeBytes
          : await fileSize(this.activePath);
      if (end === 0) return out.reverse();
      await readBackward(this.activePath, end, { matches, limit }, out);
      return out.reverse();
    });
  }

  usage(): EventLogUsage {
    return {
      mode: this.mode,
      active_bytes: this.activeBytes,
      archive_bytes: this.archiveBytes,
      archive_files: this.archiveFiles,
      records_written: this.written,
      records_counted_only: this.countedOnly,
      counted_by_type: { ...this.countedByType },
      records_dropped: this.dropped,
      last_free_check: this.lastFreeCheck ? { ...this.lastFreeCheck } : null,
    };
  }

  // ---- lifecycle ----

  private async doStart(): Promise<void> {
    if (this.state !== "idle") return;
    this.state = "starting";
    try {
      await mkdir(this.dir, { recursive: true });
      const temps = await removeTemps(this.dir);
      if (temps.length > 0)
        this.log.warn({ temps }, "removed leftovers of an interrupted compaction");
      const recovered = await recoverActive(this.activePath, this.dir, this.log);
      this.activeBytes = recovered.size;
      this.lastSeq = recovered.lastSeq;
      await this.refreshArchiveStats();
    } catch (err) {
      if (!isSpaceError(err)) {
        this.state = "idle";
        this.starting = null;
        throw err;
      }
      this.setMode("counting-only", "no space while opening the event log", { err });
    }
    this.state = "running";
    await this.runCheck();
    const early = this.early;
    this.early = [];
    for (const e of early) this.accept(e);
    this.log.info(
      { dir: this.dir, mode: this.mode, active_bytes: this.activeBytes, last_seq: this.lastSeq },
      "event log started",
    );
  }

  private async doStop(): Promise<void> {
    if (this.starting) await this.starting.catch(() => undefined);
    if (this.state === "idle") {
      this.state = "stopped";
      this.dropped += this.early.length;
      this.early = [];
      return;
    }
    this.state = "stopping";
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    await this.checking;
    await this.lane.run(async () => {
      while (this.pending.length > 0) await this.writeBatch();
      this.state = "stopped";
      const h = this.handle;
      this.handle = null;
      await h
        ?.close()
        .catch((err: unknown) => this.log.warn({ err }, "closing the event log failed"));
    });
    this.log.info({ usage: this.usage() }, "event log stopped");
  }

  // ---- modes and disk checks ----

  private setMode(next: Mode, reason: string, fields: Record<string, unknown> = {}): void {
    if (next === this.mode) return;
    const prev = this.mode;
    this.mode = next;
    const data = { ...fields, from: prev, to: next, reason, usage: this.usage() };
    if (next === "counting-only") this.log.warn(data, "event log degraded to counting-only");
    else this.log.info(data, "event log back to normal");
  }

  private checkDisk(): void {
    if (this.checking) return;
    this.checking = this.runCheck().finally(() => {
      this.checking = null;
    });
  }

  private async runCheck(): Promise<void> {
    this.appendsSinceCheck = 0;
    let free: number;
    try {
      free = await this.disk.freeBytes(this.dir);
    } catch (err) {
      this.log.warn({ err, dir: this.dir }, "free-space check of the event log failed");
      return;
    }
    this.lastFreeCheck = { free_bytes: free, at: this.clock.now() };
    const next = nextMode(this.mode, free, this.floorBytes);
    const reason =
      next === "counting-only"
        ? "free disk reached the floor"
        : `free disk above the floor plus margin (${resumeThreshold(this.floorBytes)} bytes)`;
    this.setMode(next, reason, { free_bytes: free, floor_bytes: this.floorBytes });
    if (next === "normal" && this.pending.length > 0) this.queueFlush();
  }

  private count(type: string, n = 1): void {
    this.countedOnly += n;
    this.countedByType[type] = (this.countedByType[type] ?? 0) + n;
  }

  private dropOldest<T>(queue: T[]): void {
    if (queue.length <= this.maxPending) return;
    // Drop at least 1% at once, so a flood does not pay an O(n) splice on every append.
    const excess = Math.max(queue.length - this.maxPending, Math.ceil(this.maxPending / 100));
    queue.splice(0, excess);
    this.dropped += excess;
    if (this.dropped === excess || this.dropped % 10_000 < excess) {
      this.log.warn(
        { dropped: this.dropped },
        "event log memory queue full; dropping oldest records",
      );
    }
  }

  // ---- writing ----

  private accept(e: IndexedEvent): void {
    if (this.mode === "counting-only") {
      this.count(e.event.type);
      return;
    }
    const record = toRecord(this.lastSeq + 1, e);
    const line = encodeRecord(record);
    this.lastSeq = record.seq;
    this.pending.push({ record, line });
    if (this.pending.length > this.maxPending) this.dropOldest(this.pending);
    this.queueFlush();
  }

  /** Schedules a write of the queue: after write_delay_ms, or at once when a backlog is left. */
  private queueFlush(now = false): void {
    if (this.flushQueued || this.state !== "running") return;
    this.flushQueued = true;
    const write = () =>
      void this.lane.run(async () => {
        this.flushTimer = undefined;
        this.flushQueued = false;
        await this.writeBatch();
        if (this.pending.length > 0) this.queueFlush(true);
      });
    const delay = this.deps.config.write_delay_ms;
    if (now || delay <= 0) return write();
    // Unref'd: a queued write never keeps the process alive; stop() writes what is queued.
    this.flushTimer = setTimeout(write, delay);
    this.flushTimer.unref();
  }

  /** Writes up to BATCH_MAX queued records, then compacts when due. Never rejects. */
  private async writeBatch(): Promise<void> {
    if (this.pending.length === 0) return;
    if (this.mode === "counting-only") {
      for (const p of this.pending) this.count(p.record.type);
      this.pending = [];
      return;
    }
    const batch = this.pending.splice(0, BATCH_MAX);
    const text = (this.needsNewline ? "\n" : "") + batch.map((p) => p.line).join("");
    const data = Buffer.from(text, "utf8");
    try {
      this.handle ??= await this.files.openAppend(this.activePath);
      await this.handle.append(data);
      this.activeBytes += data.length;
      this.written += batch.length;
      this.needsNewline = false;
    } catch (err) {
      await this.afterFailedWrite(err, batch);
      return;
    }
    await this.maybeCompact();
  }

  private async afterFailedWrite(err: unknown, batch: readonly Pending[]): Promise<void> {
    if (this.handle) {
      try {
        await this.handle.truncate(this.activeBytes);
      } catch (truncErr) {
        // The partial bytes stay: count them, and end them with a newline before the next record.
        this.needsNewline = true;
        this.activeBytes = await fileSize(this.activePath).catch(() => this.activeBytes);
        this.log.warn({ err: truncErr }, "could not cut a partial event-log write");
      }
    }
    if (isSpaceError(err)) {
      for (const p of batch) this.count(p.record.type);
      this.setMode("counting-only", `write failed with ${errCode(err)}`, { err });
    } else {
      this.dropped += batch.length;
      this.log.error({ err, records: batch.length }, "event-log write failed; records dropped");
    }
  }

  // ---- compaction and rotation ----

  private async maybeCompact(): Promise<void> {
    if (this.activeBytes < this.compactNotBefore) return;
    const plan = planCompaction(this.activeBytes, {
      compactAboveBytes: this.deps.config.compact_above_mb * MiB,
      keepEvents: this.deps.config.keep_events,
      keptBytesAfterLast: this.keptBytesAfterLast,
    });
    if (!plan.compact) return;
    try {
      await this.compact(plan.keepEvents);
      this.compactNotBefore = 0;
    } catch (err) {
      // Retry only after the file grew by another 1/8 of the threshold, not on every batch.
      this.compactNotBefore = this.activeBytes + (this.deps.config.compact_above_mb * MiB) / 8;
      if (isSpaceError(err)) this.setMode("counting-only", "no space to compact", { err });
      else this.log.error({ err }, "event-log compaction failed");
    }
    try {
      await this.rotateArchives();
    } catch (err) {
      this.log.error({ err }, "event-log archive rotation failed");
    }
  }

  private async compact(keepEvents: number): Promise<void> {
    const size = this.activeBytes;
    const t0 = this.clock.now();
    const cut = await cutOffset(this.activePath, size, keepEvents);
    if (cut === null) {
      // keep_events records alone are above the threshold: wait until the file doubles.
      this.keptBytesAfterLast = size;
      this.log.warn(
        { active_bytes: size, keep_events: keepEvents },
        "event-log records are larger than compact_above_mb allows",
      );
      return;
    }
    const taken = new Set((await listArchives(this.dir)).map((a) => a.name));
    const head = peekLine((await firstLine(this.activePath)) ?? "");
    const name = archiveName(this.clock.now(), head?.seq ?? 0, taken);
    await copyRangeAtomic(this.activePath, { start: 0, end: cut }, join(this.dir, name), true);
    const h = this.handle;
    this.handle = null;
    await h?.close().catch(() => undefined);
    await copyRangeAtomic(this.activePath, { start: cut, end: size }, this.activePath, false);
    this.activeBytes = size - cut;
    this.keptBytesAfterLast = this.activeBytes;
    this.log.info(
      {
        archive: name,
        archived_bytes: cut,
        kept_bytes: this.activeBytes,
        keep_events: keepEvents,
        ms: this.clock.now() - t0,
      },
      "event log compacted",
    );
  }

  private async rotateArchives(): Promise<void> {
    const archives = await listArchives(this.dir);
    const plan = planArchiveRotation(archives, this.deps.config.archive_total_mb * MiB);
    for (const name of plan.remove) {
      await unlink(join(this.dir, name)).catch((err: unknown) => {
        if (errCode(err) !== "ENOENT") throw err;
      });
    }
    if (plan.remove.length > 0)
      this.log.info({ removed: plan.remove }, "rotated event-log archives");
    this.archiveBytes = plan.keptBytes;
    this.archiveFiles = plan.keep.length;
  }

  private async refreshArchiveStats(): Promise<void> {
    await this.rotateArchives();
  }
}
