// The client's end of a stream: the 200 and its SSE headers, then the events, straight to the Node
// response under @hono/node-server (no web stream per event).
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

/**
 * Sends the stream's 200 and headers. Under @hono/node-server the events go straight to the Node
 * response; elsewhere through a web stream, whose cancel is the client going away.
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
    outgoing.writeHead(200, sseHeaders);
    outgoing.socket?.setNoDelay(true);
    return {
      write: (b) => void outgoing.write(b),
      end: () => void outgoing.end(),
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
