// The client's end of a stream: the 200 and its SSE headers, then the events, each one chunk of the
// chunked body framed here in one buffer (Node's own framing costs four socket writes per event).
import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import type { Context } from "hono";
import { nodePair } from "@ic/http";

/** The client's end of a stream. */
export interface Sink {
  write(b: Buffer): void;
  end(): void;
  /** What the route returns: the Node response was written directly, or a web stream. */
  readonly response: Response;
}

/** The chunked body's last chunk (no trailers). */
const LAST_CHUNK = Buffer.from("0\r\n\r\n");

/**
 * `b` as one chunk of a chunked HTTP/1.1 body: its size in hex, CRLF, `b`, CRLF, in one buffer. Node
 * frames a write of a chunked body as four writes to the socket (the size, a CRLF, the data, a
 * CRLF), each a queued write request and a part of the writev: per SSE event, at thousands of events
 * a second per stream, that was the largest cost of relaying one (more than copying the event once).
 * `b` must not be empty: a chunk of size 0 ends the body.
 */
export function chunkOf(b: Buffer): Buffer {
  const size = b.length.toString(16);
  const n = size.length;
  const out = Buffer.allocUnsafe(n + b.length + 4);
  // ASCII by hand: cheaper than Buffer#write for a few bytes.
  for (let i = 0; i < n; i++) out[i] = size.charCodeAt(i);
  out[n] = 0x0d;
  out[n + 1] = 0x0a;
  b.copy(out, n + 2);
  out[out.length - 2] = 0x0d;
  out[out.length - 1] = 0x0a;
  return out;
}

/**
 * Sends the stream's 200 and headers. Under @hono/node-server the events go straight to the Node
 * response, framed here when its body is chunked; elsewhere through a web stream, whose cancel is
 * the client going away.
 */
export function openSink(c: Context, headers: Record<string, string>, onCancel: () => void): Sink {
  const sseHeaders = {
    ...headers,
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    connection: "keep-alive",
    "x-accel-buffering": "no",
  };
  const outgoing = nodePair(c)?.outgoing;
  if (outgoing) {
    // writeHead stores the header, and with it whether the body is chunked (an HTTP/1.1 client):
    // then the chunks are framed here and Node writes them as they are.
    outgoing.writeHead(200, sseHeaders);
    outgoing.socket?.setNoDelay(true);
    const framed = outgoing.chunkedEncoding;
    if (framed) outgoing.chunkedEncoding = false;
    return {
      write: framed
        ? (b) => void (b.length > 0 && outgoing.write(chunkOf(b)))
        : (b) => void outgoing.write(b),
      end: framed ? () => void outgoing.end(LAST_CHUNK) : () => void outgoing.end(),
      response: RESPONSE_ALREADY_SENT,
    };
  }
  let ctl!: ReadableStreamDefaultController<Uint8Array>;
  const web = new ReadableStream<Uint8Array>({
    start: (k) => void (ctl = k),
    cancel: () => onCancel(),
  });
  return {
    write: (b) => ctl.enqueue(b),
    end: () => {
      try {
        ctl.close();
      } catch {
        // already closed by a client disconnect
      }
    },
    response: new Response(web, { status: 200, headers: sseHeaders }),
  };
}
