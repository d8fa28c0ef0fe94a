// GET /v1/stream and DELETE /v1/stream: a streamed answer read again, through any node, by the token
// that started it, from the offset the client has (`Last-Event-ID`, or `from`), as long as the
// engine that produces it lives; or stopped. The stream is found in the cluster's stream directory
// (streams/directory.ts), never by asking the engines; the engine replays what it buffered after
// that offset and goes on live (llama-server's resumable streams, keyed by the command id).
import type { IncomingMessage } from "node:http";
import type { Context, Hono } from "hono";
import { ConversationIdSchema, ServiceError } from "@ic/protocol";
import type { StreamStarted } from "@ic/protocol";
import { requestHeader, requestToken } from "@ic/http";
import { readAll, SseRelay } from "../upstream.ts";
import { readyInstances } from "../readiness.ts";
import { engineFailure } from "../engine-errors.ts";
import { ENDPOINTS } from "../chat/request.ts";
import type { ChatContext, StreamStyle } from "../chat/request.ts";
import { errorEvent } from "../chat/relay.ts";
import { openSink } from "../chat/sink.ts";
import type { Sink } from "../chat/sink.ts";
import { engineStreamCall } from "../streams/engine-stream.ts";
import type { EngineStream } from "../streams/engine-stream.ts";

export function resumeRoutes(app: Hono, ctx: ChatContext): void {
  app.get("/v1/stream", async (c) => {
    const where = found(ctx, c);
    const from = offsetOf(c);
    const upstream = await readAgain(ctx, where, from);
    const { stream } = where;
    ctx.streams.resumed(stream.command_id);
    const style = ENDPOINTS.find((e) => e.path === stream.path)?.style ?? "openai";
    const sink = openSink(
      c,
      {
        "x-conversation-id": stream.conversation_id,
        "x-command-id": stream.command_id,
        "x-instance-id": stream.instance_id,
      },
      () => upstream.destroy(),
    );
    relayAgain(upstream, sink, {
      style,
      relay: new SseRelay(stream.command_id, style === "anthropic", from),
      model: where.model,
    });
    return sink.response;
  });

  // A client's stop: the generation is cancelled in its engine (as llama-server's own DELETE).
  app.delete("/v1/stream", async (c) => {
    const where = found(ctx, c);
    const res = await engineStreamCall(ctx, engineStream(where), { method: "DELETE" }).catch(
      (e: Error) => {
        throw new ServiceError("instance_lost", `the engine did not answer (${e.message})`);
      },
    );
    res.resume();
    return c.json({ ok: true, conversation_id: where.stream.conversation_id });
  });
}

/** A stream found: its directory entry, the engine keeping it, and the model it answers for. */
interface Found {
  readonly stream: StreamStarted;
  readonly endpoint: string;
  readonly model: string;
}

function engineStream({ stream, endpoint }: Found): EngineStream {
  return { endpoint, instanceId: stream.instance_id, commandId: stream.command_id };
}

/** The engine's answer to reading the stream again from `from`; a typed error when it has none. */
async function readAgain(ctx: ChatContext, where: Found, from: number): Promise<IncomingMessage> {
  const { stream, model } = where;
  let upstream;
  try {
    upstream = await engineStreamCall(ctx, engineStream(where), { method: "GET", from });
  } catch (e) {
    throw new ServiceError(
      "instance_lost",
      `the engine producing stream ${stream.conversation_id} did not answer (${(e as Error).message}); it may be gone`,
    );
  }
  if (upstream.statusCode === 200) return upstream;
  const text = (await readAll(upstream)).toString();
  if (upstream.statusCode === 404)
    throw new ServiceError(
      "not_found",
      `stream ${stream.conversation_id} is no longer kept by its engine (it ended more than 5 minutes ago, or its engine restarted)`,
    );
  throw engineFailure(upstream.statusCode ?? 502, text, model);
}

/** Relays the engine's events to the client until the stream ends, or breaks (one error event). */
function relayAgain(
  upstream: IncomingMessage,
  sink: Sink,
  how: { readonly style: StreamStyle; readonly relay: SseRelay; readonly model: string },
): void {
  let done = false;
  const end = (err?: ServiceError) => {
    if (done) return;
    done = true;
    if (err) sink.write(errorEvent(how.style, err));
    sink.end();
    upstream.destroy();
  };
  upstream.on("data", (chunk: Buffer) => {
    const r = how.relay.push(chunk);
    if (r.out) sink.write(r.out);
    if (r.error !== undefined) end(engineFailure(500, r.error, how.model));
  });
  upstream.on("end", () => end());
  upstream.on("error", (e) =>
    end(new ServiceError("instance_lost", `the engine stream broke (${e.message}); retry`)),
  );
  upstream.on("close", () => {
    if (!upstream.complete)
      end(new ServiceError("instance_lost", "the engine stream broke; retry"));
  });
}

/** The caller's stream of `conversation_id` and its engine, or why there is none. */
function found(ctx: ChatContext, c: Context): Found {
  const asked = ConversationIdSchema.safeParse(c.req.query("conversation_id"));
  if (!asked.success)
    throw new ServiceError(
      "invalid_request",
      "conversation_id (1-128 visible ASCII characters) is required: the X-Conversation-Id of the stream",
    );
  const id = asked.data;
  const stream = ctx.streams.lookup(requestToken(c)?.name ?? null, id, Date.now());
  if (!stream)
    throw new ServiceError(
      "not_found",
      `no stream ${id} for this token: it never started, ended more than 5 minutes ago, or another token started it`,
    );
  const state = ctx.o.cluster.snapshot();
  const instance = state.instances[stream.instance_id];
  const runner = instance ? readyInstances(state, instance.model_id) : [];
  const endpoint = runner.find((r) => r.instance.instance_id === stream.instance_id)?.endpoint;
  if (!endpoint)
    throw new ServiceError(
      "not_found",
      `stream ${id} cannot be read again: the instance producing it (${stream.instance_id}) is gone or not ready`,
      { details: { instance_id: stream.instance_id } },
    );
  return { stream, endpoint, model: instance!.model_id };
}

/** The offset to read from: `from`, else `Last-Event-ID` (an event's `id:`), else the start. */
function offsetOf(c: Context): number {
  const raw = c.req.query("from") ?? requestHeader(c, "last-event-id") ?? "0";
  if (!/^\d{1,15}$/.test(raw))
    throw new ServiceError(
      "invalid_request",
      `the offset (from, or Last-Event-ID) must be a non-negative integer, not "${raw.slice(0, 40)}"`,
    );
  return Number(raw);
}
