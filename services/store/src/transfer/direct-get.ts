// HTTP/1.1 GET of a store file that reads the response body straight into the transfer's slabs: the
// kernel copies socket data into the slab (net.Socket `onread`), with no per-chunk buffer, parser or
// stream between them, so receiving costs the event loop little more than one callback per read.
//
// Invariants: only plain http, one request per connection (`Connection: close`), a body delimited by
// Content-Length (anything else is refused); the response head is read into a small spill buffer, and
// so is any read that arrives while the sink has no room (then the socket is paused until it has);
// a connection that ends before Content-Length bytes is an error, never a short success.
import { connect, type Socket } from "node:net";

/** Where a direct body goes: the transfer's slab pipeline, behind the transfer's own checks. */
export interface DirectSink {
  /** The free region the next read may fill; undefined while every slab is busy. */
  space(): Uint8Array | undefined;
  /** `n` bytes were written at the start of the region `space()` returned last. May throw. */
  commit(n: number): void;
  /** Takes bytes that arrived elsewhere; a returned promise must settle before the next call. */
  push(chunk: Uint8Array): Promise<void> | undefined;
  /** Settles once `space()` can offer a region again; rejects when the sink broke. */
  ready(): Promise<void>;
}

/** A response body not yet read; the transfer either runs it into a sink or cancels it. */
export interface DirectBody {
  readonly kind: "direct";
  /** Body bytes the response announced (Content-Length). */
  readonly length: number;
  /** Reads the whole body into `sink`; rejects on a broken connection or when the sink throws. */
  run(sink: DirectSink, signal: AbortSignal): Promise<void>;
  cancel(): void;
}

export interface DirectResponse {
  readonly status: number;
  /** Response headers, names in lower case. */
  readonly headers: ReadonlyMap<string, string>;
  readonly body: DirectBody;
}

/** Size of the spill buffer: the response head, and reads that arrive while the sink is full. */
const SPILL_BYTES = 256 * 1024;
const MAX_HEAD_BYTES = 64 * 1024;
const HEAD_END = Buffer.from("\r\n\r\n");

/**
 * No byte from the store for this long (while the transfer is ready to take some) fails the request,
 * so a store that vanished without closing the connection cannot hang staging (fetch's default).
 */
export const IDLE_TIMEOUT_MS = 300_000;

/** GET `url` (http only) with `headers`; resolves once the response head is in. */
export function directGet(
  url: URL,
  headers: Readonly<Record<string, string>>,
  signal: AbortSignal,
  options: { readonly idleTimeoutMs?: number } = {},
): Promise<DirectResponse> {
  if (url.protocol !== "http:")
    throw new Error(`direct transfers need an http URL, not ${url.href}`);
  for (const [k, v] of Object.entries(headers)) {
    if (/[\r\n:]/.test(k) || /[\r\n]/.test(v))
      throw new Error(`invalid header ${JSON.stringify(k)}`);
  }
  return new Promise((resolve, reject) => {
    const idle = options.idleTimeoutMs ?? IDLE_TIMEOUT_MS;
    const conn = new DirectConnection({ url, headers, signal, idleMs: idle }, { resolve, reject });
    conn.start();
  });
}

class DirectConnection {
  private readonly spill = Buffer.allocUnsafeSlow(SPILL_BYTES);
  private socket: Socket | undefined;
  /** Buffer the next read lands in. */
  private next: Uint8Array = this.spill;
  private phase: "head" | "waiting" | "body" | "done" = "head";
  private head: Buffer[] = [];
  private headBytes = 0;
  /** Body bytes that arrived with the head, taken first when the body runs. */
  private early: Buffer | undefined;
  private length = 0;
  private received = 0;
  private sink: DirectSink | undefined;
  private settle: ((error?: unknown) => void) | undefined;
  /** The connection broke while the body waited to be run; `run()` reports it unless `early` completes the body. */
  private lost: { readonly error: unknown } | undefined;
  /** Paused until the sink has room again. */
  private paused = false;
  private readonly onAbort = () => this.fail(this.signal.reason);

  private readonly url: URL;
  private readonly headers: Readonly<Record<string, string>>;
  private readonly signal: AbortSignal;
  private readonly idleMs: number;
  private readonly resolveHead: (r: DirectResponse) => void;
  private readonly rejectHead: (e: unknown) => void;

  /** `head` settles once the response head is in (or the request failed before it). */
  constructor(
    request: {
      readonly url: URL;
      readonly headers: Readonly<Record<string, string>>;
      readonly signal: AbortSignal;
      readonly idleMs: number;
    },
    head: { readonly resolve: (r: DirectResponse) => void; readonly reject: (e: unknown) => void },
  ) {
    ({ url: this.url, headers: this.headers, signal: this.signal, idleMs: this.idleMs } = request);
    this.resolveHead = head.resolve;
    this.rejectHead = head.reject;
  }

  start(): void {
    if (this.signal.aborted) {
      this.rejectHead(this.signal.reason);
      return;
    }
    this.signal.addEventListener("abort", this.onAbort, { once: true });
    const socket = connect({
      host: this.url.hostname.replace(/^\[|\]$/g, ""),
      port: Number(this.url.port || 80),
      onread: { buffer: () => this.next, callback: (n, buf) => this.onRead(n, buf) },
    });
    this.socket = socket;
    socket.setNoDelay(true);
    socket.setTimeout(this.idleMs);
    socket.on("timeout", () => {
      // Quiet because the transfer paused it (or has not run the body yet) is not a dead store:
      // the timer starts over.
      if (this.phase === "waiting" || this.paused) {
        socket.setTimeout(this.idleMs);
        return;
      }
      this.fail(new Error(`no data from ${this.url.host} for ${this.idleMs / 1000} s`));
    });
    socket.on("error", (e) => this.fail(e));
    socket.on("close", () => {
      if (this.phase !== "done") this.fail(new Error(this.closedMessage()));
    });
    const lines = [
      `GET ${this.url.pathname}${this.url.search} HTTP/1.1`,
      `host: ${this.url.host}`,
      "connection: close",
      ...Object.entries(this.headers).map(([k, v]) => `${k}: ${v}`),
    ];
    socket.write(`${lines.join("\r\n")}\r\n\r\n`);
  }

  /** The socket read `n` bytes into `buf`; returning false pauses it. */
  private onRead(n: number, buf: Uint8Array): boolean {
    try {
      if (this.phase === "head") return this.onHead(Buffer.from(buf.subarray(0, n)));
      if (this.phase !== "body") return false;
      if (buf === this.spill) {
        // Landed outside the slabs (the sink was full when it was offered): copy it in.
        if (!this.take(n)) return false;
        const wait = this.sink!.push(this.spill.subarray(0, n));
        if (wait) return this.pauseUntil(wait);
      } else {
        if (!this.take(n)) return false;
        this.sink!.commit(n);
      }
      if (this.received === this.length) {
        this.finish();
        return false;
      }
      return this.offer();
    } catch (e) {
      this.fail(e);
      return false;
    }
  }

  /** Counts `n` body bytes; false (and the transfer failed) when they exceed Content-Length. */
  private take(n: number): boolean {
    if (this.received + n > this.length) {
      this.fail(new Error(`store sent more than its Content-Length of ${this.length} bytes`));
      return false;
    }
    this.received += n;
    return true;
  }

  /** Points the next read at the sink's free region, or pauses until the sink has one. */
  private offer(): boolean {
    const region = this.sink!.space();
    if (region) {
      this.next = region;
      return true;
    }
    this.next = this.spill;
    return this.pauseUntil(this.sink!.ready());
  }

  private pauseUntil(wait: Promise<void>): false {
    this.paused = true;
    wait.then(
      () => {
        this.paused = false;
        if (this.phase !== "body") return;
        try {
          if (this.offer()) this.socket?.resume();
        } catch (e) {
          this.fail(e);
        }
      },
      (e: unknown) => this.fail(e),
    );
    return false;
  }

  private onHead(chunk: Buffer): boolean {
    this.head.push(chunk);
    this.headBytes += chunk.length;
    const all = Buffer.concat(this.head);
    const end = all.indexOf(HEAD_END);
    if (end === -1) {
      if (this.headBytes > MAX_HEAD_BYTES) throw new Error("store response head is too large");
      return true;
    }
    const response = this.parseHead(all.subarray(0, end).toString("latin1"));
    const rest = all.subarray(end + HEAD_END.length);
    this.head = [];
    this.phase = "waiting";
    if (rest.length > 0) this.early = Buffer.from(rest);
    this.resolveHead(response);
    // Paused until the transfer runs the body (or cancels it).
    return false;
  }

  private parseHead(text: string): DirectResponse {
    const [statusLine = "", ...lines] = text.split("\r\n");
    const m = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine);
    if (!m) throw new Error(`not an HTTP/1.1 response: ${JSON.stringify(statusLine.slice(0, 80))}`);
    const headers = new Map<string, string>();
    for (const line of lines) {
      const i = line.indexOf(":");
      if (i > 0) headers.set(line.slice(0, i).trim().toLowerCase(), line.slice(i + 1).trim());
    }
    const status = Number(m[1]);
    if (headers.has("transfer-encoding")) {
      throw new Error(`store sent transfer-encoding ${headers.get("transfer-encoding")}`);
    }
    const length = Number(headers.get("content-length") ?? NaN);
    if (status >= 200 && status < 300 && !Number.isSafeInteger(length)) {
      throw new Error("store response has no valid content-length");
    }
    this.length = Number.isSafeInteger(length) ? length : 0;
    return {
      status,
      headers,
      body: {
        kind: "direct",
        length: this.length,
        run: (sink, signal) => this.run(sink, signal),
        cancel: () => {
          this.phase = "done";
          this.close();
        },
      },
    };
  }

  private run(sink: DirectSink, signal: AbortSignal): Promise<void> {
    if (this.phase !== "waiting") return Promise.reject(new Error("body already read"));
    return new Promise<void>((resolve, reject) => {
      this.settle = (e) => (e === undefined ? resolve() : reject(e));
      this.sink = sink;
      this.phase = "body";
      if (signal !== this.signal) {
        if (signal.aborted) return this.fail(signal.reason);
        signal.addEventListener("abort", () => this.fail(signal.reason), { once: true });
      }
      const go = () => {
        if (this.phase !== "body") return;
        if (this.received === this.length) return this.finish();
        if (this.lost) return this.fail(this.lost.error);
        if (this.offer()) this.socket?.resume();
      };
      try {
        const early = this.early;
        this.early = undefined;
        const wait = early && this.take(early.length) ? sink.push(early) : undefined;
        if (wait) wait.then(go, (e: unknown) => this.fail(e));
        else go();
      } catch (e) {
        this.fail(e);
      }
    });
  }

  private finish(): void {
    if (this.phase === "done") return;
    this.phase = "done";
    this.close();
    this.settle?.();
  }

  private fail(error: unknown): void {
    if (this.phase === "done") return;
    if (this.phase === "waiting") {
      this.lost ??= { error };
      this.close();
      return;
    }
    const head = this.phase === "head";
    this.phase = "done";
    this.close();
    if (head) this.rejectHead(error);
    else this.settle?.(error);
  }

  private close(): void {
    this.signal.removeEventListener("abort", this.onAbort);
    this.socket?.destroy();
  }

  private closedMessage(): string {
    return this.phase === "head"
      ? `connection to ${this.url.host} closed before a response`
      : `connection to ${this.url.host} closed after ${this.received} of ${this.length} body bytes`;
  }
}
