// The store host's one bounded pool for background hashing (registering a directory that has no
// manifest, adding piece hashes to an old one), so no big model holds the rest and progress shows.
//
// Invariants: at most `concurrency` jobs run; one job per (model, kind) at a time (adding it again
// joins it); the job with the fewest bytes left goes first: a running job gives way at its next
// checkpoint (before each read) to a queued one smaller than what it has left, and resumes after,
// so a 100 GiB hash never holds a 1 MB model back; stop() and cancel() abort running and paused jobs
// through their AbortSignal (the hash's read loop stops before its next read) and reject queued
// ones at once.
import type { Logger } from "@ic/log";
import type { ModelId } from "@ic/protocol";
import { errText } from "../transfer/transfer.ts";

/** Why a model is hashed: to register its directory, or to add piece hashes to its manifest. */
export type HashKind = "register" | "pieces";

/** What the pool does for one model, as the heartbeat shows it. */
export interface HashJobProgress {
  readonly model_id: ModelId;
  readonly kind: HashKind;
  /** `paused`: started, giving way to smaller jobs. */
  readonly state: "queued" | "running" | "paused";
  readonly done_bytes: number;
  readonly total_bytes: number;
}

/**
 * What a running job gets: its signal (aborted by stop/cancel), where to count hashed bytes, and a
 * checkpoint to await before each read (it waits there while smaller jobs go first).
 */
export interface HashJobContext {
  readonly signal: AbortSignal;
  readonly onProgress: (bytes: number) => void;
  readonly checkpoint: () => Promise<void>;
}

export interface HashJob<T> {
  readonly id: ModelId;
  readonly kind: HashKind;
  /** Bytes the job will hash (its progress's total; the queue's order). */
  readonly totalBytes: number;
  readonly run: (ctx: HashJobContext) => Promise<T>;
}

export interface HashPoolOptions {
  readonly log: Logger;
  /** Jobs hashing at once (default 1: hashing is disk- and CPU-bound, and serving comes first). */
  readonly concurrency?: number | undefined;
  readonly now?: () => number;
}

interface Entry {
  readonly job: HashJob<unknown>;
  readonly controller: AbortController;
  readonly promise: Promise<unknown>;
  readonly resolve: (v: unknown) => void;
  readonly reject: (e: unknown) => void;
  state: "queued" | "running" | "paused";
  done: number;
  /** Set while paused: lets it run again. */
  resume?: () => void;
}

export class HashPool {
  private readonly entries = new Map<string, Entry>();
  private readonly running = new Set<Promise<void>>();
  private stopped = false;

  constructor(private readonly o: HashPoolOptions) {}

  /** Queues a job; a job of the same model and kind already queued or running is joined instead. */
  add<T>(job: HashJob<T>): Promise<T> {
    const key = keyOf(job.id, job.kind);
    const had = this.entries.get(key);
    // A cancelled job still ending is not joined: the new one takes its place in the table (the
    // old one still counts against the concurrency until it ends).
    if (had && !had.controller.signal.aborted) return had.promise as Promise<T>;
    if (this.stopped) return Promise.reject(new Error("the store host is stopping"));
    let resolve!: (v: unknown) => void;
    let reject!: (e: unknown) => void;
    const promise = new Promise<unknown>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    // A caller that drops the promise (a background job) never leaves a rejection unhandled.
    promise.catch(() => undefined);
    const entry: Entry = {
      job: job as HashJob<unknown>,
      controller: new AbortController(),
      promise,
      resolve,
      reject,
      state: "queued",
      done: 0,
    };
    this.entries.set(key, entry);
    this.pump();
    return promise as Promise<T>;
  }

  /** Whether a job for this model (of this kind, or any) is queued or running. */
  has(id: ModelId, kind?: HashKind): boolean {
    if (kind) return this.entries.has(keyOf(id, kind));
    return [...this.entries.values()].some((e) => e.job.id === id);
  }

  /** Aborts this model's jobs (its directory went, or a pull rewrites it). */
  cancel(id: ModelId, reason: string): void {
    for (const e of this.entries.values())
      if (e.job.id === id) this.abort(e, new Error(`${id}: ${reason}`));
  }

  /** Every queued and running job with its hashed bytes, running first. */
  progress(): HashJobProgress[] {
    return [...this.entries.values()]
      .map((e) => ({
        model_id: e.job.id,
        kind: e.job.kind,
        state: e.state,
        done_bytes: Math.min(e.done, e.job.totalBytes),
        total_bytes: e.job.totalBytes,
      }))
      .sort((a, b) => (a.state === b.state ? 0 : a.state === "running" ? -1 : 1));
  }

  /** Aborts every job (queued ones reject at once) and waits for the running ones to end. */
  async stop(): Promise<void> {
    this.stopped = true;
    for (const e of this.entries.values()) this.abort(e, new Error("the store host is stopping"));
    await Promise.allSettled([...this.running]);
  }

  private abort(e: Entry, reason: Error): void {
    e.controller.abort(reason);
    // A paused job runs on to its checkpoint, which throws the reason.
    e.resume?.();
    e.resume = undefined;
    if (e.state === "queued") {
      this.entries.delete(keyOf(e.job.id, e.job.kind));
      e.reject(reason);
    }
  }

  private pump(): void {
    const limit = Math.max(1, this.o.concurrency ?? 1);
    while (!this.stopped && this.busy() < limit) {
      const next = [...this.entries.values()]
        .filter((e) => e.state !== "running")
        .sort((a, b) => left(a) - left(b))[0];
      if (!next) return;
      if (next.state === "paused") {
        next.state = "running";
        const resume = next.resume;
        next.resume = undefined;
        resume?.();
        continue;
      }
      next.state = "running";
      const run = this.execute(next).finally(() => {
        this.running.delete(run);
        this.pump();
      });
      this.running.add(run);
    }
  }

  /** Jobs holding a slot now: started and not paused (a cancelled one still ending counts). */
  private busy(): number {
    let paused = 0;
    for (const e of this.entries.values()) if (e.state === "paused" && e.resume) paused++;
    return this.running.size - paused;
  }

  /** A running job's checkpoint: it pauses while a queued job is smaller than what it has left. */
  private async checkpoint(e: Entry): Promise<void> {
    const smaller = () =>
      [...this.entries.values()].some((q) => q.state === "queued" && left(q) < left(e));
    while (!this.stopped && !e.controller.signal.aborted && e.state === "running" && smaller()) {
      const resumed = new Promise<void>((r) => (e.resume = r));
      e.state = "paused";
      this.pump();
      await resumed;
    }
    e.controller.signal.throwIfAborted();
  }

  private async execute(e: Entry): Promise<void> {
    const { job, controller } = e;
    const now = this.o.now ?? Date.now;
    const started = now();
    const fields = { modelId: job.id, kind: job.kind, totalBytes: job.totalBytes };
    this.o.log.info(fields, "hashing started");
    try {
      const out = await job.run({
        signal: controller.signal,
        onProgress: (bytes) => void (e.done += bytes),
        checkpoint: () => this.checkpoint(e),
      });
      this.o.log.info({ ...fields, ms: now() - started }, "hashing done");
      e.resolve(out);
    } catch (err) {
      if (controller.signal.aborted)
        this.o.log.info({ ...fields, doneBytes: e.done, reason: errText(err) }, "hashing stopped");
      else this.o.log.warn({ ...fields, err }, "hashing failed");
      e.reject(err);
    } finally {
      const key = keyOf(job.id, job.kind);
      if (this.entries.get(key) === e) this.entries.delete(key);
    }
  }
}

/** Bytes a job has left to hash. */
function left(e: Entry): number {
  return Math.max(0, e.job.totalBytes - e.done);
}

function keyOf(id: ModelId, kind: HashKind): string {
  return `${kind} ${id}`;
}
