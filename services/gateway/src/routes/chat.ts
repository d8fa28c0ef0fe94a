// POST /v1/chat/completions and GET /v1/models: OpenAI-compatible, routed to the least-loaded ready
// instance of the model (balancing.ts; a model not ready yet answers a retryable 404, readiness.ts)
// and proxied to its rank-0 llama-server. Streams pass through as they arrive; a lost worker
// (TaskFailed), a lost master (session change) or a dead upstream ends the request within seconds
// with an error -- an SSE error event for streams, a 500 for non-streaming requests.
import { randomUUID } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import type { Hono } from "hono";
import { z } from "zod";
import { errorBody, ServiceError } from "@ic/protocol";
import type { CommandId, SessionId, TaskId } from "@ic/protocol";
import type { Logger } from "@ic/log";
import { parseJson } from "../errors.ts";
import { nodePair, watchClient } from "../node-http.ts";
import { IdRewriter, postUpstream, readAll } from "../upstream.ts";
import type { ClusterView } from "../ports.ts";
import { chooseInstance, outstandingByInstance } from "../balancing.ts";
import type { PendingRequest } from "../balancing.ts";
import { notServableError, readiness, readyModels } from "../readiness.ts";

const ContentPart = z.object({ type: z.string() }).passthrough();
const MessageSchema = z
  .object({
    role: z.string().min(1),
    content: z.union([z.string(), z.array(ContentPart), z.null()]),
  })
  .passthrough();

export const ChatRequestSchema = z
  .object({
    model: z.string().min(1).max(300),
    messages: z.array(MessageSchema).min(1),
    max_tokens: z.number().int().positive().optional(),
    max_completion_tokens: z.number().int().positive().optional(),
    stream: z.boolean().optional(),
    temperature: z.number().min(0).max(2).optional(),
    top_p: z.number().min(0).max(1).optional(),
    n: z.literal(1).optional(),
  })
  .passthrough();

export interface ChatOptions {
  readonly cluster: ClusterView;
  readonly log: Logger;
  /** Called with the task id when a request starts and ends (tracing hooks in here). */
  readonly onTask?: (e: {
    taskId: TaskId;
    commandId: CommandId;
    modelId: string;
    phase: "start" | "end";
    ok?: boolean;
  }) => void;
  /** Extra headers for an instance's engine: its API key (only gateways may talk to engines). */
  readonly engineHeaders?: (instanceId: string) => Record<string, string>;
}

/** Resolves when the task fails (TaskFailed) or the session changes; the reason is a ServiceError. */
function watchFailure(
  cluster: ClusterView,
  taskId: () => TaskId | undefined,
  session: SessionId | null,
) {
  let fail!: (e: ServiceError) => void;
  const failed = new Promise<ServiceError>((resolve) => (fail = resolve));
  const off = cluster.on({
    event: (ev) => {
      const e = ev.event;
      if (e.type === "TaskFailed" && e.task_id === taskId()) {
        fail(
          new ServiceError(
            "task_failed",
            `the instance serving this request was lost (${e.reason}); retry`,
          ),
        );
      }
    },
    session: (prev, next) => {
      if (prev === session && next !== session) {
        fail(
          new ServiceError(
            "session_changed",
            "the cluster session changed (master failover); retry the request",
          ),
        );
      }
    },
  });
  return { failed, off };
}

export function chatRoutes(app: Hono, o: ChatOptions): void {
  /** Requests this gateway sent, until they end (their tasks may not be replicated yet). */
  const pending = new Map<CommandId, PendingRequest>();

  app.get("/v1/models", (c) => {
    // Only models with a ready instance: the same test the chat route applies.
    return c.json({
      object: "list",
      data: readyModels(o.cluster.snapshot()).map((id) => ({
        id,
        object: "model",
        created: 0,
        owned_by: "cluster",
      })),
    });
  });

  app.post("/v1/chat/completions", async (c) => {
    const body = await parseJson(c, ChatRequestSchema);
    const cluster = o.cluster;
    const snap = cluster.snapshot();
    const ready = readiness(snap, body.model, Date.now());
    if (ready.kind !== "ready") throw notServableError(body.model, ready);
    const self = cluster.livePeers().find((p) => p.heartbeat.peer_key === cluster.peerKey);
    const target = chooseInstance(ready.instances, {
      outstanding: outstandingByInstance(Object.values(snap.tasks), [...pending.values()]),
      selfPeerKey: cluster.peerKey,
      rttMs: (peer) => self?.heartbeat.links.find((l) => l.peer_key === peer)?.rtt_ms,
    })!;
    // 32 characters after the prefix, like llama-server's own ids (see the streaming rewrite).
    const commandId = `chatcmpl-${randomUUID().replaceAll("-", "")}` as CommandId;
    pending.set(commandId, { command_id: commandId, instance_id: target.instance.instance_id });
    const session = cluster.sessionId;
    let taskId: TaskId | undefined;
    const watch = watchFailure(cluster, () => taskId, session);
    const upstreamAbort = new AbortController();
    const onClientGone = () => upstreamAbort.abort(new Error("client disconnected"));
    const unwatchClient = watchClient(c, onClientGone);
    const cleanup = (ok: boolean) => {
      pending.delete(commandId);
      watch.off();
      unwatchClient();
      if (taskId) {
        o.onTask?.({ taskId, commandId, modelId: body.model, phase: "end", ok });
        cluster
          .command(
            ok
              ? { type: "FinishTask", task_id: taskId }
              : { type: "FailTask", task_id: taskId, reason: "request failed" },
          )
          .catch(() => {});
      }
    };

    // The upstream request leaves first; the master creates the task while the engine starts working.
    // The command waits until the request is on the wire: a new connection to the engine (llama-server
    // closes one after each stream) takes an event-loop turn, and on the master node the command runs
    // synchronously, so starting it at once would put its work ahead of the request.
    let sent!: () => void;
    const onWire = new Promise<void>((r) => (sent = r));
    const upstreamP = postUpstream(
      `${target.endpoint}/v1/chat/completions`,
      JSON.stringify(body),
      upstreamAbort.signal,
      sent,
      o.engineHeaders?.(target.instance.instance_id),
    );
    upstreamP.catch(() => {});
    const taskP = onWire.then(() =>
      cluster.command({
        type: "CreateTask",
        command_id: commandId,
        model_id: target.instance.model_id,
        instance_id: target.instance.instance_id,
      }),
    );
    const failed = watch.failed.then((e) => Promise.reject(e));
    failed.catch(() => {});
    let upstream: IncomingMessage;
    try {
      const reply = await Promise.race([taskP, failed]);
      taskId = reply.task_id;
      if (taskId) o.onTask?.({ taskId, commandId, modelId: body.model, phase: "start" });
      upstream = await Promise.race([upstreamP, failed]);
    } catch (e) {
      upstreamAbort.abort();
      cleanup(false);
      if (e instanceof ServiceError) throw e;
      throw new ServiceError(
        "upstream_failed",
        `the engine for ${body.model} did not answer: ${(e as Error).message}`,
        { cause: e },
      );
    }
    const headers: Record<string, string> = {
      "x-task-id": taskId ?? "",
      "x-command-id": commandId,
      "x-instance-id": target.instance.instance_id,
    };
    const status = upstream.statusCode ?? 502;

    if (status !== 200) {
      const text = (await readAll(upstream).catch(() => Buffer.alloc(0))).toString();
      cleanup(false);
      // The engine's own 4xx (e.g. context too long) is the client's problem; pass it through as is.
      if (status >= 400 && status < 500) {
        return new Response(text, {
          status,
          headers: { ...headers, "content-type": "application/json" },
        });
      }
      throw new ServiceError("upstream_failed", `engine answered ${status}: ${text.slice(0, 500)}`);
    }

    if (!body.stream) {
      try {
        const raw = await Promise.race([readAll(upstream), failed]);
        const json = JSON.parse(raw.toString()) as Record<string, unknown>;
        cleanup(true);
        return c.json({ ...json, id: commandId }, 200, headers);
      } catch (e) {
        upstreamAbort.abort();
        cleanup(false);
        if (e instanceof ServiceError) throw e;
        throw new ServiceError(
          "instance_lost",
          `the instance was lost mid-request: ${(e as Error).message}; retry`,
          { cause: e },
        );
      }
    }

    // Streaming: complete SSE lines are forwarded as they arrive (id rewritten in place). Under
    // @hono/node-server they go straight to the Node response; elsewhere through a web stream.
    const rewriter = new IdRewriter(commandId);
    const sseHeaders = {
      ...headers,
      "content-type": "text/event-stream",
      "cache-control": "no-cache",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    };
    const outgoing = nodePair(c)?.outgoing;
    let sink: { write(b: Buffer): void; end(): void };
    let web: ReadableStream<Uint8Array> | undefined;
    if (outgoing) {
      outgoing.writeHead(200, sseHeaders);
      outgoing.socket?.setNoDelay(true);
      sink = { write: (b) => void outgoing.write(b), end: () => outgoing.end() };
    } else {
      let ctl!: ReadableStreamDefaultController<Uint8Array>;
      web = new ReadableStream<Uint8Array>({
        start: (k) => void (ctl = k),
        cancel: () => onClientGone(),
      });
      sink = {
        write: (b) => ctl.enqueue(b),
        end: () => {
          try {
            ctl.close();
          } catch {
            // already closed by a client disconnect
          }
        },
      };
    }
    let finished = false;
    const finish = (err?: ServiceError) => {
      if (finished) return;
      finished = true;
      if (err) {
        sink.write(Buffer.from(`data: ${JSON.stringify(errorBody(err))}\n\n`));
        upstreamAbort.abort();
      }
      // The client gets its last bytes before the task bookkeeping runs.
      sink.end();
      cleanup(!err);
    };
    void watch.failed.then((e) => finish(e));
    upstream.on("data", (chunk: Buffer) => {
      if (finished) return;
      const out = rewriter.push(chunk);
      if (out) sink.write(out);
    });
    upstream.on("end", () => {
      if (finished) return;
      const rest = rewriter.flush();
      if (rest) sink.write(rest);
      finish();
    });
    upstream.on("error", (e) => {
      if (upstreamAbort.signal.aborted) return finish();
      finish(new ServiceError("instance_lost", `the engine stream broke: ${e.message}; retry`));
    });
    upstream.on("close", () => {
      if (!upstream.complete)
        finish(
          new ServiceError("instance_lost", "the engine stream broke before it completed; retry"),
        );
    });
    return web ? new Response(web, { status: 200, headers: sseHeaders }) : RESPONSE_ALREADY_SENT;
  });
}
