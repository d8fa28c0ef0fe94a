// One pino root logger per process, JSON on stdout when logging.enabled, optional HTTP ingest, and a
// bounded in-memory tail of the process's own lines (GET /logs reads and follows it).
// Secrets (hub token, authorization headers) are redacted at the root so no child can leak them.
// Nothing here can stall logging: the ingest buffer and the tail are bounded and drop, counted.
import pino from "pino";
import type { Logger } from "pino";
import { Writable } from "node:stream";

export type { Logger } from "pino";

export interface LogOptions {
  readonly enabled: boolean;
  readonly level?: string;
  readonly ingestUrl?: string | undefined;
  readonly base?: Record<string, unknown>;
  /** Where JSON lines go; stdout by default. Tests pass a collecting stream. */
  readonly destination?: NodeJS.WritableStream;
  /**
   * Applied to every serialized line before any destination sees it (stdout, ingest, the tail):
   * the last word on secrets a program holds in memory (the publisher's hub token).
   */
  readonly scrub?: (line: string) => string;
  /**
   * The in-memory tail that also gets every line: by default the process's (`processLogTail()`)
   * when logging to stdout, none with another destination; null for none.
   */
  readonly tail?: LogTail | null;
}

const REDACT = [
  "token",
  "hf_token",
  "hfToken",
  "*.token",
  "*.hf_token",
  "*.hfToken",
  "authorization",
  "*.authorization",
  "headers.authorization",
  "req.headers.authorization",
  "secret",
  "*.secret",
  "password",
  "*.password",
  "pass",
  "*.pass",
  "engine_key",
  "*.engine_key",
];

/** Bounds of the ingest buffer: lines wait here while the sink is slow or down, then are dropped. */
export const INGEST_MAX_LINES = 10_000;
export const INGEST_MAX_BYTES = 8 * 1024 * 1024;
const INGEST_TIMEOUT_MS = 5000;

/**
 * Batches log lines and POSTs them (newline-delimited JSON) to the ingest URL, one request at a
 * time, each bounded by a timeout. Never blocks logging: while the sink is slow or dead, lines
 * wait in a buffer bounded by count and bytes, and beyond it are dropped (counted).
 */
export class IngestStream extends Writable {
  private buffer: string[] = [];
  private bufferedBytes = 0;
  private timer: NodeJS.Timeout;
  private inFlight = false;
  private droppedLines = 0;
  private sentLines = 0;
  private failedPosts = 0;

  constructor(
    private readonly url: string,
    private readonly bounds: { maxLines?: number; maxBytes?: number; intervalMs?: number } = {},
  ) {
    super();
    this.timer = setInterval(() => void this.flush(), bounds.intervalMs ?? 1000);
    this.timer.unref();
  }

  /** What waits, what was dropped, sent and failed so far. */
  get stats(): {
    buffered_lines: number;
    buffered_bytes: number;
    dropped_lines: number;
    sent_lines: number;
    failed_posts: number;
    in_flight: boolean;
  } {
    return {
      buffered_lines: this.buffer.length,
      buffered_bytes: this.bufferedBytes,
      dropped_lines: this.droppedLines,
      sent_lines: this.sentLines,
      failed_posts: this.failedPosts,
      in_flight: this.inFlight,
    };
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    const line = chunk.toString();
    const bytes = Buffer.byteLength(line);
    if (
      this.buffer.length < (this.bounds.maxLines ?? INGEST_MAX_LINES) &&
      this.bufferedBytes + bytes <= (this.bounds.maxBytes ?? INGEST_MAX_BYTES)
    ) {
      this.buffer.push(line);
      this.bufferedBytes += bytes;
    } else this.droppedLines++;
    cb();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    clearInterval(this.timer);
    cb(err);
  }

  override _final(cb: (err?: Error | null) => void): void {
    clearInterval(this.timer);
    this.flush().then(
      () => cb(),
      () => cb(),
    );
  }

  async flush(): Promise<void> {
    if (this.inFlight || this.buffer.length === 0) return;
    const lines = this.buffer.length;
    const body = this.buffer.join("");
    this.buffer = [];
    this.bufferedBytes = 0;
    this.inFlight = true;
    try {
      const r = await fetch(this.url, {
        method: "POST",
        headers: { "content-type": "application/x-ndjson" },
        body,
        signal: AbortSignal.timeout(INGEST_TIMEOUT_MS),
      });
      await r.arrayBuffer().catch(() => undefined);
      if (r.ok) this.sentLines += lines;
      else this.failedPosts++;
    } catch {
      // Centralized logging is best effort; stdout still has every line.
      this.failedPosts++;
    } finally {
      this.inFlight = false;
    }
  }
}

/** Bounds of a log tail. */
export interface LogTailOptions {
  readonly maxLines?: number;
  readonly maxBytes?: number;
  /** A longer line is kept as a short JSON record saying how long it was. */
  readonly maxLineBytes?: number;
}

/**
 * The most recent log lines of this process (JSON, newest last), bounded by count and bytes, with
 * subscribers that see each new line as it is written. A subscriber must be quick (it runs inside
 * the log call) and is isolated: one that throws is removed, never breaking logging.
 */
export class LogTail {
  private readonly lines: string[] = [];
  private head = 0;
  private bytes = 0;
  private evicted = 0;
  private written = 0;
  private readonly subscribers = new Set<(line: string) => void>();
  private readonly maxLines: number;
  private readonly maxBytes: number;
  private readonly maxLineBytes: number;

  constructor(o: LogTailOptions = {}) {
    this.maxLines = o.maxLines ?? 2000;
    this.maxBytes = o.maxBytes ?? 2 * 1024 * 1024;
    this.maxLineBytes = o.maxLineBytes ?? 16 * 1024;
  }

  /** pino's multistream calls this with each serialized line. */
  write(chunk: string | Buffer): boolean {
    let line = (typeof chunk === "string" ? chunk : chunk.toString()).replace(/\n$/, "");
    const size = Buffer.byteLength(line);
    if (size > this.maxLineBytes) line = JSON.stringify(oversized(line, size));
    this.lines.push(line);
    this.bytes += Buffer.byteLength(line);
    this.written++;
    while (this.lines.length - this.head > this.maxLines || this.bytes > this.maxBytes) {
      this.bytes -= Buffer.byteLength(this.lines[this.head]!);
      this.head++;
      this.evicted++;
    }
    // Compact the array now and then (amortized O(1) per line).
    if (this.head > 1024 && this.head * 2 > this.lines.length) {
      this.lines.splice(0, this.head);
      this.head = 0;
    }
    for (const s of this.subscribers) {
      try {
        s(line);
      } catch {
        this.subscribers.delete(s);
      }
    }
    return true;
  }

  /** The last `n` lines (all kept ones by default), oldest first. */
  recent(n?: number): string[] {
    const start = n === undefined ? this.head : Math.max(this.head, this.lines.length - n);
    return this.lines.slice(start);
  }

  /** Calls `fn` with every line written from now on; returns the unsubscribe function. */
  subscribe(fn: (line: string) => void): () => void {
    this.subscribers.add(fn);
    return () => this.subscribers.delete(fn);
  }

  get stats(): {
    lines: number;
    bytes: number;
    written: number;
    evicted: number;
    subscribers: number;
    max_lines: number;
    max_bytes: number;
  } {
    return {
      lines: this.lines.length - this.head,
      bytes: this.bytes,
      written: this.written,
      evicted: this.evicted,
      subscribers: this.subscribers.size,
      max_lines: this.maxLines,
      max_bytes: this.maxBytes,
    };
  }
}

/** A line too long to keep: its level, time and message survive, cut short. */
function oversized(line: string, size: number): Record<string, unknown> {
  let rec: Record<string, unknown> = {};
  try {
    rec = JSON.parse(line) as Record<string, unknown>;
  } catch {
    // not JSON: only its size is kept
  }
  const msg = typeof rec.msg === "string" ? rec.msg.slice(0, 512) : undefined;
  return {
    level: rec.level,
    time: rec.time,
    ...(rec.component !== undefined ? { component: rec.component } : {}),
    msg,
    truncated_bytes: size,
  };
}

let processTail: LogTail | undefined;
/** The tail of this process's log: the root logger feeds it (unless told otherwise). */
export function processLogTail(): LogTail {
  processTail ??= new LogTail();
  return processTail;
}

export function createLogger(options: LogOptions): Logger {
  if (!options.enabled) return pino({ level: "silent" });
  const out = options.destination ?? process.stdout;
  // Every destination takes every level: the root's `level` alone decides (an entry without one
  // defaults to info, which silently dropped debug and trace).
  const streams: pino.StreamEntry[] = [{ level: "trace", stream: out }];
  if (options.ingestUrl)
    streams.push({ level: "trace", stream: new IngestStream(options.ingestUrl) });
  // The process's root logger (on stdout) feeds the process tail; loggers with their own
  // destination (tests) feed only the tail they are given.
  const tail =
    options.tail !== undefined ? options.tail : options.destination ? null : processLogTail();
  if (tail) streams.push({ level: "trace", stream: tail });
  const scrub = options.scrub;
  const entries = scrub
    ? streams.map((e) => ({ ...e, stream: scrubbing(e.stream as NodeJS.WritableStream, scrub) }))
    : streams;
  return pino(
    {
      level: options.level ?? "info",
      base: options.base ?? { pid: process.pid },
      redact: { paths: REDACT, censor: "[redacted]" },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    pino.multistream(entries),
  );
}

/** A stream that passes each line through `scrub` to `inner`. */
function scrubbing(inner: NodeJS.WritableStream, scrub: (line: string) => string): Writable {
  return new Writable({
    write(chunk: Buffer | string, _enc, cb) {
      inner.write(scrub(chunk.toString()));
      cb();
    },
  });
}

/** A logger that discards everything; for tests and library defaults. */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}

export { guardProcess } from "./process-guard.ts";
export type { GuardOptions, ProcessGuard } from "./process-guard.ts";
