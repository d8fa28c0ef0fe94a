// One pino root logger per process, JSON on stdout when logging.enabled, optional HTTP ingest.
// Secrets (hub token, authorization headers) are redacted at the root so no child can leak them.
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
];

/** Batches log lines and POSTs them (newline-delimited JSON) to the ingest URL; never blocks logging. */
class IngestStream extends Writable {
  private buffer: string[] = [];
  private timer: NodeJS.Timeout;
  private inFlight = false;

  constructor(private readonly url: string) {
    super();
    this.timer = setInterval(() => void this.flush(), 1000);
    this.timer.unref();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    if (this.buffer.length < 10_000) this.buffer.push(chunk.toString());
    cb();
  }

  override _final(cb: (err?: Error | null) => void): void {
    clearInterval(this.timer);
    this.flush().then(
      () => cb(),
      () => cb(),
    );
  }

  private async flush(): Promise<void> {
    if (this.inFlight || this.buffer.length === 0) return;
    const body = this.buffer.join("");
    this.buffer = [];
    this.inFlight = true;
    try {
      await fetch(this.url, {
        method: "POST",
        headers: { "content-type": "application/x-ndjson" },
        body,
        signal: AbortSignal.timeout(5000),
      });
    } catch {
      // Centralized logging is best effort; stdout still has every line.
    } finally {
      this.inFlight = false;
    }
  }
}

export function createLogger(options: LogOptions): Logger {
  if (!options.enabled) return pino({ level: "silent" });
  const out = options.destination ?? process.stdout;
  // Every destination takes every level: the root's `level` alone decides (an entry without one
  // defaults to info, which silently dropped debug and trace).
  const streams: pino.StreamEntry[] = [{ level: "trace", stream: out }];
  if (options.ingestUrl)
    streams.push({ level: "trace", stream: new IngestStream(options.ingestUrl) });
  return pino(
    {
      level: options.level ?? "info",
      base: options.base ?? { pid: process.pid },
      redact: { paths: REDACT, censor: "[redacted]" },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    pino.multistream(streams),
  );
}

/** A logger that discards everything; for tests and library defaults. */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
