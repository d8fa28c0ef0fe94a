// The trace janitor: every hour it removes the trace files older than tracing.retention_days (by
// the creation time in their name) and temporary files an interrupted write left behind.
// Only names this package writes are ever touched; the decision is pure, the class owns the timer.
import type { Logger } from "@ic/log";
import type { Clock } from "@ic/protocol";
import { parseTempFileName, parseTraceFileName } from "./files.ts";
import type { TraceFiles } from "./files.ts";

export const DAY_MS = 86_400_000;
export const HOUR_MS = 3_600_000;
/** A temporary file older than this is a leftover, never a write in progress. */
const TEMP_MAX_AGE_MS = HOUR_MS;

/**
 * Names to delete at `nowMs`: trace files created more than `retentionDays` ago (0: every trace
 * file; they go at the next sweep) and stale temporary files. Other names are never returned.
 */
export function expiredFiles(
  names: readonly string[],
  nowMs: number,
  retentionDays: number,
): string[] {
  const keepAfter = nowMs - retentionDays * DAY_MS;
  const out: string[] = [];
  for (const name of names) {
    const t = parseTraceFileName(name);
    if (t) {
      if (t.createdAtMs < keepAfter || retentionDays === 0) out.push(name);
      continue;
    }
    const tmp = parseTempFileName(name);
    if (tmp && tmp.createdAtMs < nowMs - TEMP_MAX_AGE_MS) out.push(name);
  }
  return out;
}

export interface JanitorOptions {
  readonly files: TraceFiles;
  readonly retentionDays: number;
  readonly clock: Pick<Clock, "now">;
  readonly log: Logger;
  /** Time between sweeps; hourly by default. */
  readonly intervalMs?: number;
}

export class Janitor {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<string[]> | undefined;

  constructor(private readonly o: JanitorOptions) {}

  /** Sweeps now and then every interval. */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.sweepLogged(), this.o.intervalMs ?? HOUR_MS);
    this.timer.unref();
    void this.sweepLogged();
  }

  /** One sweep: removes what expiredFiles names; resolves with the removed names. */
  sweep(): Promise<string[]> {
    this.running ??= (async () => {
      try {
        const names = await this.o.files.names();
        const doomed = expiredFiles(names, this.o.clock.now(), this.o.retentionDays);
        for (const name of doomed) await this.o.files.remove(name);
        return doomed;
      } finally {
        this.running = undefined;
      }
    })();
    return this.running;
  }

  private async sweepLogged(): Promise<void> {
    try {
      const removed = await this.sweep();
      if (removed.length > 0) this.o.log.info({ removed: removed.length }, "pruned old traces");
    } catch (e) {
      this.o.log.warn({ err: e }, "trace janitor sweep failed");
    }
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.running?.catch(() => {});
  }
}
