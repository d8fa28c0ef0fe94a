// The tracing service of one node: the on/off switch (config's initial value, changed by PUT
// /v1/tracing for new requests only), the per-request observer the chat path calls, and the queue
// that turns finished requests into trace files after the response: gathered for up to
// writeDelayMs, built on the event loop, written by a worker thread (writer.ts), off the request path.
// Invariants: with tracing off, observe() returns undefined (the chat path then records nothing);
// a request is saved only once it ended with a task id; at most maxPending traces wait for the disk
// (newer ones are dropped and counted, never the response delayed); stop() writes what is queued.
import type { ChatEvent, ChatObserver, ChatRequestSeen } from "@ic/protocol";
import type { Logger } from "@ic/log";
import { TraceFiles, traceFileName } from "./files.ts";
import { systemClock } from "@ic/protocol";
import type { Clock } from "@ic/protocol";
import { Janitor } from "./janitor.ts";
import { buildTrace } from "./trace.ts";
import type { TraceRecord } from "./trace.ts";
import { TraceWriter } from "./writer.ts";
import type { WriteItem } from "./writer.ts";

/** Traces built and handed to the writer thread at once. */
const DRAIN_BATCH = 64;

/** The config's `tracing` section (dir with `~` already expanded by the loader). */
export interface TracingConfig {
  readonly enabled: boolean;
  readonly retention_days: number;
  readonly dir: string;
}

export interface TracingOptions {
  readonly config: TracingConfig;
  readonly log: Logger;
  /** This node's name (written into each trace). */
  readonly node: string;
  readonly clock?: Pick<Clock, "now">;
  readonly janitorIntervalMs?: number;
  /** Traces waiting for the disk beyond which new ones are dropped (default 1000). */
  readonly maxPending?: number;
  /** How long a finished trace may wait to be written with others (default 200 ms). */
  readonly writeDelayMs?: number;
}

export interface TracingStatus {
  readonly enabled: boolean;
  readonly retention_days: number;
  readonly dir: string;
  /** Since this process started: trace files written, traces dropped (queue full or write failed). */
  readonly written: number;
  readonly dropped: number;
  readonly pending: number;
}

export class Tracing implements AsyncDisposable {
  readonly files: TraceFiles;
  private on: boolean;
  private readonly queue: TraceRecord[] = [];
  private flushing: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  /** The pending timer is a 0-delay one (no further wait). */
  private timerNow = false;
  private stopping = false;
  private stopP: Promise<void> | undefined;
  private readonly writeDelayMs: number;
  private stopped = false;
  private written = 0;
  private dropped = 0;
  private readonly janitor: Janitor;
  private readonly writer: TraceWriter;
  private readonly maxPending: number;

  constructor(private readonly o: TracingOptions) {
    this.on = o.config.enabled;
    this.files = new TraceFiles(o.config.dir);
    this.writer = new TraceWriter(this.files.dir);
    this.maxPending = o.maxPending ?? 1000;
    this.writeDelayMs = o.writeDelayMs ?? 200;
    this.janitor = new Janitor({
      files: this.files,
      retentionDays: o.config.retention_days,
      clock: o.clock ?? systemClock,
      log: o.log,
      ...(o.janitorIntervalMs !== undefined ? { intervalMs: o.janitorIntervalMs } : {}),
    });
  }

  get enabled(): boolean {
    return this.on;
  }

  /** Turns tracing on or off for requests that arrive from now on. */
  setEnabled(on: boolean): void {
    if (on !== this.on) this.o.log.info({ enabled: on }, "tracing switched");
    this.on = on;
  }

  status(): TracingStatus {
    return {
      enabled: this.on,
      retention_days: this.o.config.retention_days,
      dir: this.files.dir,
      written: this.written,
      dropped: this.dropped,
      pending: this.queue.length,
    };
  }

  async start(): Promise<void> {
    await this.files.ensureDir();
    this.janitor.start();
  }

  /** The chat path's observer factory: undefined (no cost) while tracing is off. */
  readonly observe = (r: ChatRequestSeen): ChatObserver | undefined => {
    if (!this.on || this.stopped) return undefined;
    const events: ChatEvent[] = [];
    let task = false;
    return {
      event: (e) => {
        events.push(e);
        if (e.type === "task") task = true;
        else if (e.type === "end" && task)
          this.enqueue({
            commandId: r.commandId,
            receivedAt: r.receivedAt,
            node: this.o.node,
            events,
          });
      },
    };
  };

  private enqueue(rec: TraceRecord): void {
    if (this.stopped) return;
    if (this.queue.length >= this.maxPending) {
      this.dropped++;
      if (this.dropped % 1000 === 1)
        this.o.log.warn({ dropped: this.dropped }, "trace writes fall behind; dropping traces");
      return;
    }
    this.queue.push(rec);
    this.kick(this.queue.length >= DRAIN_BATCH ? 0 : this.writeDelayMs);
  }

  /**
   * Schedules a drain in `delayMs` (0: on the next turn; the response's last bytes go out first).
   * Waiting a little gathers the traces of many requests into one hand-over to the writer thread.
   */
  private kick(delayMs: number): void {
    if (this.flushing) return; // the running drain re-kicks when it is done
    if (this.timer) {
      if (delayMs > 0 || this.timerNow) return;
      clearTimeout(this.timer);
    }
    this.timerNow = delayMs === 0;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flushing = this.drain().finally(() => {
        this.flushing = undefined;
        if (this.queue.length > 0)
          this.kick(this.queue.length >= DRAIN_BATCH || this.stopping ? 0 : this.writeDelayMs);
      });
    }, delayMs);
    if (delayMs > 0) this.timer.unref();
  }

  /** Builds one batch of traces and hands it to the writer thread. */
  private async drain(): Promise<void> {
    // Bounded: building is synchronous work on the event loop (about 35 µs a trace).
    const batch = this.queue.splice(0, DRAIN_BATCH);
    const items: WriteItem[] = [];
    const models = new Map<string, string>();
    for (const rec of batch) {
      const trace = buildTrace(rec);
      if (!trace) continue;
      const name = traceFileName(trace.otherData.taskId, rec.receivedAt);
      this.files.pathOf(name); // stays inside the dir (the name is built from a checked id)
      items.push({ name, data: JSON.stringify(trace) });
      models.set(name, trace.otherData.modelId);
    }
    for (const r of await this.writer.write(items)) {
      if (r.ok) {
        this.written++;
        this.files.remember(r.name, models.get(r.name)!);
      } else {
        this.dropped++;
        this.o.log.warn({ file: r.name, error: r.error }, "trace write failed");
      }
    }
  }

  /** Resolves once every queued trace is on disk (tests, shutdown). */
  async flush(): Promise<void> {
    while (this.queue.length > 0 || this.flushing || this.timer) {
      if (this.flushing) await this.flushing;
      else {
        this.kick(0);
        await new Promise<void>((r) => setTimeout(r, 1));
      }
    }
  }

  /** One janitor sweep now; resolves with the removed file names. */
  prune(): Promise<string[]> {
    return this.janitor.sweep();
  }

  stop(): Promise<void> {
    this.stopP ??= (async () => {
      this.stopping = true;
      await this.flush();
      this.stopped = true;
      await this.janitor.stop();
      await this.writer.stop();
    })();
    return this.stopP;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
