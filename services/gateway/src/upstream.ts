// HTTP/1.1 client for the engine with a keep-alive pool (node:http is leaner than fetch per chunk),
// and the in-place rewrite of the engine's completion id into the API command id.
import { Agent, request } from "node:http";
import type { IncomingMessage } from "node:http";

const agent = new Agent({ keepAlive: true, maxSockets: 256, keepAliveMsecs: 10_000 });

/**
 * POSTs JSON; resolves with the response (headers read, body streaming) or rejects on connect errors.
 * A pooled connection the engine closed while idle fails before any response: that is retried once
 * on a fresh connection (the request never reached the engine).
 */
export async function postUpstream(
  url: string,
  body: string,
  signal: AbortSignal,
  onSent?: () => void,
  headers: Readonly<Record<string, string>> = {},
): Promise<IncomingMessage> {
  try {
    return await postOnce(url, body, signal, onSent, headers);
  } catch (e) {
    if ((e as { reusedSocket?: boolean }).reusedSocket && !signal.aborted)
      return postOnce(url, body, signal, onSent, headers);
    onSent?.();
    throw e;
  }
}

/**
 * `onSent` runs once the request is handed to the kernel (after the connect), or when it fails:
 * work that should not delay the request waits for it.
 */
function postOnce(
  url: string,
  body: string,
  signal: AbortSignal,
  onSent: (() => void) | undefined,
  extraHeaders: Readonly<Record<string, string>>,
): Promise<IncomingMessage> {
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
          ...extraHeaders,
          "content-type": "application/json",
          "content-length": Buffer.byteLength(body),
        },
      },
      resolve,
    );
    req.setNoDelay(true);
    if (onSent) req.once("finish", onSent);
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

/**
 * Rewrites `"id":"<engine id>"` to `"id":"<command id>"` in SSE bytes. Command ids have the engine's
 * id length, so this is an in-place copy; other lengths fall back to a string replace.
 */
export class IdRewriter {
  private theirs: Buffer | undefined;
  private readonly ours: Buffer;
  private carry: Buffer = Buffer.alloc(0);

  constructor(commandId: string) {
    this.ours = Buffer.from(`"id":"${commandId}"`);
  }

  /** Returns the complete lines of `chunk` (plus earlier carry), rewritten; keeps a partial line back. */
  push(chunk: Buffer): Buffer | null {
    const buf = this.carry.length > 0 ? Buffer.concat([this.carry, chunk]) : chunk;
    const cut = buf.lastIndexOf(0x0a);
    if (cut < 0) {
      this.carry = Buffer.from(buf);
      return null;
    }
    this.carry = cut + 1 < buf.length ? Buffer.from(buf.subarray(cut + 1)) : Buffer.alloc(0);
    return this.rewrite(buf.subarray(0, cut + 1));
  }

  /** What is left at the end of the stream. */
  flush(): Buffer | null {
    const rest = this.carry;
    this.carry = Buffer.alloc(0);
    return rest.length > 0 ? this.rewrite(rest) : null;
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
