// HTTP/1.1 client for the engine with a keep-alive pool (node:http is leaner than fetch per chunk),
// and the in-place rewrite of the engine's completion id into the API command id.
import { Agent, request } from "node:http";
import type { IncomingMessage } from "node:http";

const agent = new Agent({ keepAlive: true, maxSockets: 256, keepAliveMsecs: 10_000 });

export interface UpstreamOptions {
  readonly signal: AbortSignal;
  /** Runs once the request is handed to the kernel (after the connect), or when it fails. */
  readonly onSent?: (() => void) | undefined;
  readonly headers?: Readonly<Record<string, string>> | undefined;
  /** A new connection that is not up within this long fails with UpstreamConnectTimeout. */
  readonly connectTimeoutMs?: number | undefined;
}

/** The engine did not accept the TCP connection in time (a dead or cut-off host drops the SYN). */
export class UpstreamConnectTimeout extends Error {
  constructor(readonly ms: number) {
    super(`no connection to the engine within ${ms} ms`);
    this.name = "UpstreamConnectTimeout";
  }
}

/**
 * POSTs JSON; resolves with the response (headers read, body streaming) or rejects on connect errors.
 * A pooled connection the engine closed while idle fails before any response: that is retried once
 * on a fresh connection (the request never reached the engine).
 */
export async function postUpstream(
  url: string,
  body: string,
  o: UpstreamOptions,
): Promise<IncomingMessage> {
  try {
    return await postOnce(url, body, o);
  } catch (e) {
    if ((e as { reusedSocket?: boolean }).reusedSocket && !o.signal.aborted)
      return postOnce(url, body, o);
    o.onSent?.();
    throw e;
  }
}

function postOnce(url: string, body: string, o: UpstreamOptions): Promise<IncomingMessage> {
  const { signal, onSent, connectTimeoutMs } = o;
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const req = request(
      {
        agent,
        host: u.hostname,
        port: u.port,
        path: u.pathname,
        method: "POST",
        headers: {
          ...o.headers,
          "content-type": "application/json",
          "content-length": Buffer.byteLength(body),
        },
      },
      resolve,
    );
    req.setNoDelay(true);
    if (onSent) req.once("finish", onSent);
    if (connectTimeoutMs !== undefined) {
      req.once("socket", (sock) => {
        if (!sock.connecting) return;
        const timer = setTimeout(
          () => req.destroy(new UpstreamConnectTimeout(connectTimeoutMs)),
          connectTimeoutMs,
        );
        const clear = () => clearTimeout(timer);
        sock.once("connect", clear);
        req.once("close", clear);
      });
    }
    req.on("error", (e) => reject(Object.assign(e, { reusedSocket: req.reusedSocket })));
    const onAbort = () =>
      req.destroy(signal.reason instanceof Error ? signal.reason : new Error("aborted"));
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    req.on("close", () => signal.removeEventListener("abort", onAbort));
    req.end(body);
  });
}

export async function readAll(res: IncomingMessage): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of res) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

const LF2 = Buffer.from("\n\n");
const CRLF2 = Buffer.from("\r\n\r\n");
const ERROR_EVENT = Buffer.from('data: {"error"');

/** End (exclusive) of the last complete SSE event in `buf`, or -1 when there is none. */
function lastEventEnd(buf: Buffer): number {
  const a = buf.lastIndexOf(LF2);
  const b = buf.lastIndexOf(CRLF2);
  return Math.max(a < 0 ? -1 : a + 2, b < 0 ? -1 : b + 4);
}

/** Start of the first event in `buf` that is an engine error (`data: {"error"...`), or -1. */
function errorEventAt(buf: Buffer): number {
  for (let i = buf.indexOf(ERROR_EVENT); i >= 0; i = buf.indexOf(ERROR_EVENT, i + 1))
    if (i === 0 || buf[i - 1] === 0x0a) return i;
  return -1;
}

export interface RelayChunk {
  /** Complete events to forward (ids rewritten), or null. */
  readonly out: Buffer | null;
  /** The JSON text of an engine error event; the stream ends there (nothing after it is kept). */
  readonly error?: string;
}

/**
 * Cuts engine SSE bytes into complete events: only whole events are forwarded, so an error event the
 * gateway appends never lands inside a half-written one. It rewrites `"id":"<engine id>"` to
 * `"id":"<command id>"` (same length: an in-place copy; other lengths fall back to a string
 * replace) and stops at the engine's own error event, which the caller re-issues in the envelope.
 */
export class SseRelay {
  private theirs: Buffer | undefined;
  private readonly ours: Buffer;
  private carry: Buffer = Buffer.alloc(0);

  constructor(commandId: string) {
    this.ours = Buffer.from(`"id":"${commandId}"`);
  }

  push(chunk: Buffer): RelayChunk {
    const buf = this.carry.length > 0 ? Buffer.concat([this.carry, chunk]) : chunk;
    const end = lastEventEnd(buf);
    if (end < 0) {
      this.carry = Buffer.from(buf);
      return { out: null };
    }
    this.carry = end < buf.length ? Buffer.from(buf.subarray(end)) : Buffer.alloc(0);
    const events = buf.subarray(0, end);
    const err = errorEventAt(events);
    if (err >= 0) {
      this.carry = Buffer.alloc(0);
      const stop = events.indexOf(0x0a, err);
      const text = events
        .subarray(err + 6, stop < 0 ? end : stop)
        .toString()
        .trim();
      return { out: err > 0 ? this.rewrite(events.subarray(0, err)) : null, error: text };
    }
    return { out: this.rewrite(events) };
  }

  /** Bytes of an event the engine started but never finished (a broken stream leaves these). */
  get pendingBytes(): number {
    return this.carry.length;
  }

  private rewrite(out: Buffer): Buffer {
    if (!this.theirs) {
      const at = out.indexOf('"id":"');
      const end = at >= 0 ? out.indexOf(0x22, at + 6) : -1;
      if (end < 0) return out;
      this.theirs = Buffer.from(out.subarray(at, end + 1));
    }
    const theirs = this.theirs;
    if (theirs.length !== this.ours.length) {
      return Buffer.from(out.toString().split(theirs.toString()).join(this.ours.toString()));
    }
    for (let i = out.indexOf(theirs); i >= 0; i = out.indexOf(theirs, i + theirs.length))
      this.ours.copy(out, i);
    return out;
  }
}
