// A streaming request that survives its node: sends it with a conversation id, reads the answer's
// events and their ids, and when the connection breaks before the answer ended, reads the rest
// through the next node (GET /v1/stream with Last-Event-ID). The `openai` and Anthropic clients do
// not reconnect by themselves; `ic chat` uses this, and docs/api.md shows it.
import { randomUUID } from "node:crypto";

export interface ResumableStreamOptions {
  /** Base URLs of nodes: the first takes the request; a resume tries the others in turn. */
  readonly nodes: readonly string[];
  /** The endpoint: /v1/chat/completions, /v1/completions, /v1/responses or /v1/messages. */
  readonly path: string;
  /** The request body (`stream: true` is set). */
  readonly body: Record<string, unknown>;
  /** Sent with every request: the token (`authorization`, or `x-api-key`). */
  readonly headers?: Readonly<Record<string, string>>;
  /** The conversation id (default: a new one); only the same token reads it again. */
  readonly conversationId?: string;
  /** Reconnects at most (default 6), `retryDelayMs` apart (default 200). */
  readonly attempts?: number;
  readonly retryDelayMs?: number;
  /** Told of each resume: the node, the offset, and how long since the connection broke. */
  readonly onResume?: (r: { node: string; from: number; afterMs: number }) => void;
  readonly fetch?: typeof fetch;
}

/** One server-sent event: its name (Anthropic's and the Responses API's), data, and offset id. */
export interface StreamEvent {
  readonly event: string | undefined;
  readonly data: string;
  readonly id: number | undefined;
}

/** An answer that ends in an error the server sent, or one that cannot be read again. */
export class StreamError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly body: string,
  ) {
    super(message);
    this.name = "StreamError";
  }
}

/** Whether an event ends the answer (so a connection closed after it is no loss). */
function isLast(e: StreamEvent): boolean {
  if (e.data === "[DONE]") return true;
  if (e.event === "message_stop" || e.event === "error") return true;
  if (e.event === "response.completed" || e.event === "response.failed") return true;
  return e.data.startsWith('{"error"');
}

/** The events of a body, as they arrive. */
async function* events(body: ReadableStream<Uint8Array>): AsyncGenerator<StreamEvent> {
  const decoder = new TextDecoder();
  let buf = "";
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(chunk, { stream: true });
    let at;
    while ((at = buf.indexOf("\n\n")) >= 0) {
      const raw = buf.slice(0, at);
      buf = buf.slice(at + 2);
      let event: string | undefined;
      let id: number | undefined;
      const data: string[] = [];
      for (const line of raw.split("\n")) {
        if (line.startsWith("data: ")) data.push(line.slice(6));
        else if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("id: ")) id = Number(line.slice(4));
      }
      if (data.length > 0 || id !== undefined) yield { event, data: data.join("\n"), id };
    }
  }
}

/**
 * The answer's events, in order, each once, across reconnects. Throws StreamError when a node
 * refuses the request or the resume (a 4xx: the stream is gone, or not this token's), or when every
 * attempt failed.
 */
export async function* resumableStream(o: ResumableStreamOptions): AsyncGenerator<StreamEvent> {
  const f = o.fetch ?? fetch;
  const conversation = o.conversationId ?? `conv-${randomUUID()}`;
  const headers = { ...o.headers, "x-conversation-id": conversation };
  const attempts = o.attempts ?? 6;
  let from = 0;
  let body: ReadableStream<Uint8Array> | null = await open(
    f(`${o.nodes[0]}${o.path}`, {
      method: "POST",
      headers: { ...headers, "content-type": "application/json" },
      body: JSON.stringify({ ...o.body, stream: true }),
    }),
  );
  let lostAt = 0;
  for (let attempt = 0; ;) {
    try {
      for await (const e of events(body!)) {
        if (e.id !== undefined) from = e.id;
        if (e.data.length > 0) yield e;
        if (isLast(e)) return;
      }
    } catch {
      // the connection broke: read on elsewhere
    }
    lostAt ||= Date.now();
    body = null;
    while (body === null) {
      attempt += 1;
      if (attempt > attempts)
        throw new StreamError(`the stream broke and ${attempts} resumes failed`, 0, "");
      const node = o.nodes[attempt % o.nodes.length]!;
      const url = `${node}/v1/stream?conversation_id=${encodeURIComponent(conversation)}`;
      const r = await f(url, { headers: { ...headers, "last-event-id": String(from) } }).catch(
        () => null,
      );
      if (r?.ok && r.body) {
        o.onResume?.({ node, from, afterMs: Date.now() - lostAt });
        lostAt = 0;
        body = r.body;
      } else if (r && r.status >= 400 && r.status < 500) {
        throw new StreamError(
          `the stream cannot be read again (${r.status})`,
          r.status,
          await r.text(),
        );
      } else {
        await r?.body?.cancel();
        await new Promise((res) => setTimeout(res, o.retryDelayMs ?? 200));
      }
    }
  }
}

async function open(p: Promise<Response>): Promise<ReadableStream<Uint8Array>> {
  const r = await p;
  if (!r.ok || !r.body)
    throw new StreamError(`the request was refused (${r.status})`, r.status, await r.text());
  return r.body;
}
