// Background publish jobs: at most N running, each with an append-only log that streams replay.
// Invariants: a job's log ends with exactly one of `publish complete` / `[error]: ...`, then `[done]`;
// a finished job stays readable for the retention period after completion, then is evicted;
// at most one job per key (the publish target) runs at a time.
import { randomUUID } from "node:crypto";
import type { Logger } from "@ic/log";
import type { Clock, TimerHandle } from "@ic/protocol";
import { errorMessage, PublisherError, redact } from "./errors.ts";
import type { JobContext } from "./publish.ts";

export const SUCCESS_LINE = "publish complete";
export const ERROR_PREFIX = "[error]:";
export const DONE_LINE = "[done]";
/** Spec: finished jobs are kept this long after completion. */
export const _JOB_RETENTION_SECONDS = 600;
export const MAX_CONCURRENT_JOBS = 2;
/** Lines kept per job; progress is throttled, so only a runaway job reaches this. */
const MAX_LINES = 5000;

export type JobState = "running" | "succeeded" | "failed";
export type JobBody = (ctx: JobContext) => Promise<void>;

export interface JobSubscription {
  /** Every line logged so far, in order. */
  readonly replay: readonly string[];
  /** True when the replay already ends with `[done]`. */
  readonly finished: boolean;
  unsubscribe(): void;
}

interface Job {
  readonly id: string;
  readonly label: string;
  readonly key: string | null;
  state: JobState;
  readonly lines: string[];
  readonly listeners: Set<(line: string) => void>;
  readonly abort: AbortController;
  finishedAt: number | null;
  evictTimer: TimerHandle | null;
  readonly settled: Promise<void>;
}

export interface JobManagerOptions {
  readonly clock: Clock;
  readonly log: Logger;
  readonly retentionMs?: number;
  readonly maxRunning?: number;
  /** The secret to scrub from every line (the hub token), read at each line. */
  readonly secret?: () => string | undefined;
}

export class JobManager {
  private readonly jobs = new Map<string, Job>();
  private readonly log: Logger;
  private readonly retentionMs: number;
  private readonly maxRunning: number;
  private stopping = false;

  constructor(private readonly o: JobManagerOptions) {
    this.log = o.log.child({ component: "jobs" });
    this.retentionMs = o.retentionMs ?? _JOB_RETENTION_SECONDS * 1000;
    this.maxRunning = o.maxRunning ?? MAX_CONCURRENT_JOBS;
  }

  runningCount(): number {
    let n = 0;
    for (const j of this.jobs.values()) if (j.state === "running") n++;
    return n;
  }

  state(id: string): JobState | null {
    return this.jobs.get(id)?.state ?? null;
  }

  /** The running job started under `key`, if any. */
  runningWithKey(key: string): { readonly id: string; readonly label: string } | null {
    for (const j of this.jobs.values())
      if (j.state === "running" && j.key === key) return { id: j.id, label: j.label };
    return null;
  }

  /**
   * Starts a job and returns its id at once; throws `busy` when the limit is reached and
   * `conflict` when a job with the same `key` is running.
   */
  start(label: string, body: JobBody, key?: string): string {
    if (this.stopping) throw new PublisherError("internal", "the publisher is shutting down");
    const same = key === undefined ? null : this.runningWithKey(key);
    if (same) {
      throw new PublisherError("conflict", `job ${same.id} (${same.label}) is already running`, {
        extra: { job_id: same.id },
      });
    }
    if (this.runningCount() >= this.maxRunning) {
      throw new PublisherError(
        "busy",
        `${this.maxRunning} publish jobs already running; retry when one finishes`,
      );
    }
    const id = randomUUID();
    const abort = new AbortController();
    let settle!: () => void;
    const settled = new Promise<void>((r) => (settle = r));
    const job: Job = {
      id,
      label,
      key: key ?? null,
      state: "running",
      lines: [],
      listeners: new Set(),
      abort,
      finishedAt: null,
      evictTimer: null,
      settled,
    };
    this.jobs.set(id, job);
    this.log.info({ job: id, label }, "job started");
    const ctx: JobContext = { log: (line) => this.append(job, line), signal: abort.signal };
    // The body runs detached; its outcome is recorded in the log, never thrown.
    void (async () => {
      try {
        await body(ctx);
        this.append(job, SUCCESS_LINE);
        job.state = "succeeded";
      } catch (err) {
        const msg = abort.signal.aborted
          ? "job cancelled: the publisher is shutting down"
          : errorMessage(err);
        this.append(job, `${ERROR_PREFIX} ${msg}`);
        job.state = "failed";
      }
      job.finishedAt = this.o.clock.now();
      this.append(job, DONE_LINE);
      job.listeners.clear();
      this.log.info({ job: id, state: job.state }, "job finished");
      job.evictTimer = this.o.clock.setTimeout(() => {
        this.jobs.delete(id);
        this.log.info({ job: id }, "job evicted");
      }, this.retentionMs);
      settle();
    })();
    return id;
  }

  private append(job: Job, raw: string): void {
    if (job.finishedAt !== null && raw !== DONE_LINE) return;
    const line = redact(raw, this.o.secret?.());
    if (job.lines.length >= MAX_LINES) job.lines.splice(1, 1);
    job.lines.push(line);
    for (const l of job.listeners) l(line);
  }

  /**
   * Replays the log from the start and follows new lines, atomically: no line is lost or doubled
   * between the replay and the live part. Null when the job is unknown or evicted.
   */
  subscribe(id: string, onLine: (line: string) => void): JobSubscription | null {
    const job = this.jobs.get(id);
    if (!job) return null;
    const finished = job.finishedAt !== null;
    if (!finished) job.listeners.add(onLine);
    return {
      replay: [...job.lines],
      finished,
      unsubscribe: () => job.listeners.delete(onLine),
    };
  }

  /** Cancels running jobs and waits for them to record their outcome. Idempotent. */
  async stop(): Promise<void> {
    this.stopping = true;
    const running = [...this.jobs.values()].filter((j) => j.state === "running");
    for (const j of running) j.abort.abort();
    await Promise.all(running.map((j) => j.settled));
    for (const j of this.jobs.values()) j.evictTimer?.cancel();
  }
}
