// HTTP/1.1 client for the engine with a keep-alive pool (node:http is leaner than fetch per chunk),
// and the in-place rewrite of the engine's completion id into the API command id.
import { Agent, request } from "node:http";
import type { IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { clusterHttpsAgent, trustedTls } from "@ic/tls";

const agent = new Agent({ keepAlive: true, maxSockets: 256, keepAliveMsecs: 10_000 });

/**
 * Cancels one upstream request: an AbortController without the EventTarget (creating a controller,
 * its signal and a listener cost ~20 µs a request on the chat path). Aborting before the request
 * exists fails it as soon as it is made; aborting twice keeps the first reason.
 */
export class UpstreamAbort {
  private why: Error | undefined;
  private onAbort: ((e: Error) => void) | undefined;

  get aborted(): boolean {
    return this.why !== undefined;
  }

  get reason(): Error | undefined {
    return this.why;
  }

  abort(reason: Error): void {
    if (this.why) return;
    this.why = reason;
    const f = this.onAbort;
    this.onAbort = undefined;
    f?.(reason);
  }

  /** The request in flight (one at a time: a retry replaces the first). */
  bind(f: (e: Error) => void): void {
    if (this.why) f(this.why);
    else this.onAbort = f;
  }

  /** The request closed: a later abort must not touch its socket (it may serve another request). */
  unbind(f: (e: Error) => void): void {
    if (this.onAbort === f) this.onAbort = undefined;
  }
}

export interface UpstreamOptions {
  /** Cancels the request; without it the request runs to its end. */
  readonly abort?: UpstreamAbort | undefined;
  /** Runs once the request is handed to the kernel (after the connect), or when it fails. */
  readonly onSent?: (() => void) | undefined;
  readonly headers?: Readonly<Record<string, string>> | undefined;
  /** A new connection that is not up within this long fails with UpstreamConnectTimeout. */
  readonly connectTimeoutMs?: number | undefined;
  /** POST (the default, with a JSON body), or GET and DELETE (resumable streams), bodyless. */
  readonly method?: "POST" | "GET" | "DELETE";
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
 * on a fresh connection (the request never reached the engine). Fresh, not pooled again: the pool's
 * other idle connections were opened together and the engine closes them together.
 */
export async function postUpstream(
  url: string,
  body: string,
  o: UpstreamOptions,
): Promise<IncomingMessage> {
  try {
    return await postOnce(url, body, o);
  } catch (e) {
    if ((e as { reusedSocket?: boolean }).reusedSocket && !o.abort?.aborted)
      return postOnce(url, body, o, true);
    o.onSent?.();
    throw e;
  }
}

/** Parsed engine URLs: a gateway talks to a handful of engines, over and over. */
interface Target {
  readonly hostname: string;
  readonly port: string;
  readonly pathname: string;
  readonly search: string;
  /** An `https://` engine (TLS between nodes): the cluster CA must have signed its certificate. */
  readonly tls: boolean;
}
const targets = new Map<string, Target>();

function target(url: string): Target {
  let t = targets.get(url);
  if (!t) {
    const u = new URL(url);
    t = {
      hostname: u.hostname,
      port: u.port,
      pathname: u.pathname,
      search: u.search,
      tls: u.protocol === "https:",
    };
    if (targets.size >= 1024) targets.clear();
    targets.set(url, t);
  }
  return t;
}

function postOnce(
  url: string,
  body: string,
  o: UpstreamOptions,
  fresh = false,
): Promise<IncomingMessage> {
  const { abort, onSent, connectTimeoutMs } = o;
  return new Promise((resolve, reject) => {
    const u = target(url);
    const send = u.tls ? httpsRequest : request;
    const req = send(
      {
        agent: fresh ? false : u.tls ? clusterHttpsAgent() : agent,
        ...(u.tls && fresh ? trustedTls() : {}),
        host: u.hostname,
        port: u.port,
        path: u.pathname + u.search,
        method: o.method ?? "POST",
        headers:
          (o.method ?? "POST") === "POST"
            ? {
                ...o.headers,
                "content-type": "application/json",
                "content-length": Buffer.byteLength(body),
              }
            : { ...o.headers },
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
    if (abort) {
      const onAbort = (e: Error) => void req.destroy(e);
      abort.bind(onAbort);
      req.once("close", () => abort.unbind(onAbort));
    }
    req.end(body);
  });
}

export async function readAll(res: IncomingMessage): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of res) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

const EMPTY = Buffer.alloc(0);
const DATA_PREFIX = Buffer.from("data: ");
const LF2 = Buffer.from("\n\n");
const CRLF2 = Buffer.from("\r\n\r\n");
const ERROR_EVENT = Buffer.from('data: {"error"');
/** Anthropic's streams name their error event (`event: error`, then its data line). */
const NAMED_ERROR_EVENT = Buffer.from("event: error\n");

/** End (exclusive) of the last complete SSE event in `buf`, or -1 when there is none. */
function lastEventEnd(buf: Buffer): number {
  const a = buf.lastIndexOf(LF2);
  const b = buf.lastIndexOf(CRLF2);
  return Math.max(a < 0 ? -1 : a + 2, b < 0 ? -1 : b + 4);
}

/** Start of the first line in `buf` that is `marker` (an engine error event's), or -1. */
function errorEventAt(buf: Buffer, marker: Buffer): number {
  for (let i = buf.indexOf(marker); i >= 0; i = buf.indexOf(marker, i + 1))
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
 * `named`: the stream names its error event (Anthropic's `event: error`); else it is OpenAI's
 * `data: {"error": ...}` (chat, completions, and the Responses API as llama-server sends it).
 */
export class SseRelay {
  private theirs: Buffer | undefined;
  private readonly ours: Buffer;
  private carry: Buffer = EMPTY;

  /** The engine's byte offset of the next byte pushed (what `id:` lines count). */
  private offset: number;

  /**
   * `eventIds`: the engine's byte offset this relay starts at (0 for a new stream, the `from` of a
   * resumed one): each event forwarded then carries `id: <the engine's offset after it>`, what a
   * client sends back (`Last-Event-ID`) to read on from there. Absent: no ids.
   */
  constructor(
    commandId: string,
    private readonly named = false,
    private readonly eventIds?: number,
  ) {
    this.ours = Buffer.from(`"id":"${commandId}"`);
    this.offset = eventIds ?? 0;
  }

  push(chunk: Buffer): RelayChunk {
    const buf = this.carry.length > 0 ? Buffer.concat([this.carry, chunk]) : chunk;
    // The engine writes whole events, so a chunk nearly always ends with one: no search then.
    const n = buf.length;
    const end = n >= 2 && buf[n - 1] === 0x0a && buf[n - 2] === 0x0a ? n : lastEventEnd(buf);
    if (end < 0) {
      this.carry = Buffer.from(buf);
      return { out: null };
    }
    this.carry = end < n ? Buffer.from(buf.subarray(end)) : EMPTY;
    const events = end < n ? buf.subarray(0, end) : buf;
    const base = this.offset;
    this.offset += end;
    const err = errorEventAt(events, this.named ? NAMED_ERROR_EVENT : ERROR_EVENT);
    if (err >= 0) {
      this.carry = EMPTY;
      // The data line: this one (OpenAI's), or the one after the event's name (wrapped as OpenAI's).
      const from = this.named ? events.indexOf(DATA_PREFIX, err) : err;
      const stop = from < 0 ? -1 : events.indexOf(0x0a, from);
      const data =
        from < 0
          ? "{}"
          : events
              .subarray(from + 6, stop < 0 ? end : stop)
              .toString()
              .trim();
      const text = this.named ? `{"error":${data}}` : data;
      return {
        out: err > 0 ? this.rewrite(this.withIds(events.subarray(0, err), base)) : null,
        error: text,
      };
    }
    return { out: this.rewrite(this.withIds(events, base)) };
  }

  /** `events` (whole events, starting at the engine's offset `base`), each with its `id:` line. */
  private withIds(events: Buffer, base: number): Buffer {
    if (this.eventIds === undefined) return events;
    const n = events.length;
    // One event (the engine sends one per chunk, nearly always): its id line, then it, in one copy.
    if (events.indexOf(LF2) === n - 2) {
      const line = `id: ${base + n}\n`;
      const out = Buffer.allocUnsafe(line.length + n);
      // ASCII by hand: cheaper than Buffer#write for a dozen bytes.
      for (let i = 0; i < line.length; i++) out[i] = line.charCodeAt(i);
      events.copy(out, line.length);
      return out;
    }
    // Where each event ends, then one copy.
    const ends: number[] = [];
    for (let start = 0; start < events.length;) {
      const lf = events.indexOf(LF2, start);
      start = lf < 0 ? events.length : lf + 2;
      ends.push(start);
    }
    const lines = ends.map((end) => `id: ${base + end}\n`);
    const out = Buffer.allocUnsafe(events.length + lines.reduce((n, l) => n + l.length, 0));
    let at = 0;
    let from = 0;
    ends.forEach((end, i) => {
      at += out.write(lines[i]!, at, "latin1");
      at += events.copy(out, at, from, end);
      from = end;
    });
    return out;
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
