// The task step: one request to an engine (a try, or a stream's continuation) with the master's task,
// the watch for the ways it can fail (its task, its instance, its node, the session) and its bounds
// (connect, silence between chunks, total), up to the engine's answer headers.
import type { IncomingMessage } from "node:http";
import { ServiceError } from "@ic/protocol";
import type { ChatEvent, ChatObserver, Instance, SessionId, TaskId } from "@ic/protocol";
import type { Context } from "hono";
import { nodePair, watchClient } from "@ic/http";
import { postUpstream, UpstreamAbort, UpstreamConnectTimeout } from "../upstream.ts";
import type { ClusterView } from "@ic/protocol";
import type { ReadyInstance } from "../readiness.ts";
import type { Prediction } from "../prompt-cache.ts";
import type { LoadTicket } from "../request-load.ts";
import { engineStreamCall } from "../streams/engine-stream.ts";
import { preciseNow } from "./request.ts";
import type { ChatContext, ChatLimits, RequestContext } from "./request.ts";

/**
 * The ways a request fails while it waits on the engine: its task failed, its instance was deleted
 * or lost a node, the session changed. `fail` adds the gateway's own reasons (timeouts). The first
 * reason wins. Task failures seen before the task id is known are remembered (the TaskFailed event
 * can overtake the CreateTask reply).
 */
export function watchFailure(cluster: ClusterView, instance: Instance, session: SessionId | null) {
  let taskId: TaskId | undefined;
  const failedTasks = new Map<TaskId, string>();
  let fail!: (e: ServiceError) => void;
  let failure: ServiceError | undefined;
  const failed = new Promise<ServiceError>((resolve) => {
    fail = (e) => {
      if (failure) return;
      failure = e;
      resolve(e);
    };
  });
  const nodes = new Set(instance.assignments.map((a) => a.node_id));
  const lost = (why: string) =>
    new ServiceError("task_failed", `the instance serving this request was lost (${why}); retry`);
  const off = cluster.on({
    event: (ev) => {
      const e = ev.event;
      if (e.type === "TaskFailed") {
        if (e.task_id === taskId) fail(lost(e.reason));
        else failedTasks.set(e.task_id, e.reason);
      } else if (e.type === "InstanceDeleted" && e.instance_id === instance.instance_id) {
        fail(lost(`instance deleted: ${e.reason}`));
      } else if (e.type === "NodeLeft" && nodes.has(e.node_id)) {
        fail(lost(`node ${e.node_id} left: ${e.reason}`));
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
  return {
    failed,
    fail,
    get failure() {
      return failure;
    },
    /** The task id is known: a failure that came first counts now. */
    taskCreated(id: TaskId) {
      taskId = id;
      const why = failedTasks.get(id);
      if (why !== undefined) fail(lost(why));
    },
    off,
  };
}

/** One request to an engine (a try, or a stream's continuation), once its answer's headers came. */
export interface Leg {
  readonly instanceId: string;
  /** The engine's base URL. */
  readonly endpoint: string;
  readonly upstream: IncomingMessage;
  readonly status: number;
  readonly taskId: TaskId | undefined;
  readonly watch: ReturnType<typeof watchFailure>;
  /** Rejects with the watch's failure (raced against reads). */
  readonly failed: Promise<never>;
  readonly abort: UpstreamAbort;
  /** The client went away: the engine request is aborted. */
  clientGone(): void;
  /** A chunk arrived: the silence bound starts again. */
  touch(): void;
  /**
   * The engine's first bytes of the answer arrived: its prompt is computed, and no longer queued
   * before the next request's there (request-load.ts). A whole answer (no stream) does it at close.
   */
  prefilled(): void;
  /** Ends the leg's bookkeeping, once: load, timers, watches, and its task (finished or failed). */
  close(ok: boolean, tokens?: number): void;
}

/** A try failed before the client got a byte of it: another instance may serve the request. */
export class BeforeFirstByte extends Error {
  constructor(readonly error: ServiceError) {
    super(error.message);
  }
}

/** Losses a retry on another instance can mend (not a timeout, a client mistake or a session change). */
export const RETRY_ON: ReadonlySet<string> = new Set(["instance_lost", "task_failed"]);

/** The typed error for a failed connection or a broken response (never a client mistake). */
export function connectionError(e: unknown, model: string): ServiceError {
  if (e instanceof ServiceError) return e;
  if (e instanceof UpstreamConnectTimeout)
    return new ServiceError(
      "upstream_timeout",
      `the engine for ${model} did not accept a connection within ${e.ms} ms; retry`,
      { cause: e },
    );
  const code = (e as { code?: string }).code;
  return new ServiceError(
    "instance_lost",
    `the engine for ${model} was lost (${code ?? (e as Error).message}); retry`,
    { cause: e },
  );
}

/** The prompt-cache map's prediction for `target` (routing.ts `pick`): none when it went elsewhere. */
function predictionOn(request: RequestContext, target: ReadyInstance): Prediction | undefined {
  const p = request.prediction;
  return p?.instanceId === target.instance.instance_id ? p : undefined;
}

/**
 * The engine slot of the prompt recorded for `target` is busy while the leg is open: the returned
 * function frees it (prompt-cache.ts `inFlight`).
 */
function slotBusy(ctx: ChatContext, request: RequestContext, target: ReadyInstance): () => void {
  const p = predictionOn(request, target);
  return p ? ctx.cache.inFlight(p) : () => {};
}

/**
 * The request in flight on `target` (request-load.ts), with the prefill the prompt-cache map expects
 * there (none known when the request was not routed on the caches, or went elsewhere).
 */
function loadTicket(ctx: ChatContext, request: RequestContext, target: ReadyInstance): LoadTicket {
  const p = predictionOn(request, target);
  return ctx.load.begin(target.instance.instance_id, p?.prefillChars ?? 0);
}

/** What one leg sends where: the body (the request's, or a continuation's), and who observes it. */
export interface LegSpec {
  readonly target: ReadyInstance;
  readonly body: Record<string, unknown>;
  /** The observer of this leg's phases (none for a stream's continuation). */
  readonly obs: ChatObserver | undefined;
}

/**
 * Sends the request (`leg.body`) to `leg.target`'s engine and waits for its answer's headers, with the
 * master's task, the failure watch and the request's bounds. Throws BeforeFirstByte when it fails
 * before then.
 */
export async function openLeg(
  ctx: ChatContext,
  request: RequestContext,
  leg: LegSpec,
): Promise<Leg> {
  const { c } = request;
  const { obs, target } = leg;
  const cluster = ctx.o.cluster;
  obs?.event(routedEvent(target));
  const load = loadTicket(ctx, request, target);
  const endBusy = slotBusy(ctx, request, target);
  let closeTask: (() => void) | undefined;
  const session = cluster.sessionId;
  let taskId: TaskId | undefined;
  const watch = watchFailure(cluster, target.instance, session);
  const failed = watch.failed.then((e) => Promise.reject(e));
  failed.catch(() => {});
  const upstreamAbort = new UpstreamAbort();
  // A resumable stream's engine keeps generating past a dropped connection: when its client
  // leaves (not this gateway), it is cancelled there, at once or after the grace for a resume.
  const keptByEngine = request.resumable;
  let left = false;
  const onClientGone = () => {
    request.clientGone = true;
    upstreamAbort.abort(new Error("client disconnected"));
    if (keptByEngine && !left) leaveStream(ctx, request, target);
    left = true;
  };
  const abortUpstream = (why: string) => upstreamAbort.abort(new Error(why));
  const unwatchClient = watchClient(c, onClientGone);
  const bounds = legBounds(ctx.limits, request.deadline, watch);
  let closed = false;
  const close = (ok: boolean, tokens?: number) => {
    if (closed) return;
    closed = true;
    load.end();
    endBusy();
    closeTask?.();
    watch.off();
    unwatchClient();
    bounds.clear();
    if (!taskId) return;
    if (ok) ctx.reports.finish(taskId, tokens);
    else failTask(cluster, taskId);
  };

  const { upstreamP, taskP } = dispatch(ctx, request, leg, { abort: upstreamAbort, watch });
  upstreamP.catch(() => {});
  let upstream: IncomingMessage;
  try {
    const reply = await Promise.race([taskP, failed]);
    taskId = reply.task_id;
    if (taskId) {
      closeTask = ctx.load.taskOpened();
      watch.taskCreated(taskId);
      obs?.event({ type: "task", at: preciseNow(), taskId });
    }
    upstream = await Promise.race([upstreamP, failed]);
  } catch (e) {
    abortUpstream("request failed before the engine answered");
    close(false);
    if (!taskId) failLateTask(cluster, taskP);
    throw new BeforeFirstByte(connectionError(watch.failure ?? e, request.body.model));
  }
  const status = upstream.statusCode ?? 502;
  obs?.event({ type: "headers", at: preciseNow(), status });
  bounds.touch();
  return {
    instanceId: target.instance.instance_id,
    endpoint: target.endpoint,
    upstream,
    status,
    taskId,
    watch,
    failed,
    abort: upstreamAbort,
    clientGone: onClientGone,
    touch: bounds.touch,
    prefilled: load.prefilled,
    close,
  };
}

/**
 * The bounds of a leg: the whole request (its deadline) and, once the engine answers, the silence
 * between chunks. The silence bound is checked lazily: a chunk only records its time (`touch`), and
 * the one timer, when it fires, fails the request or sleeps for what is left. Re-arming a timer per
 * chunk cost ~5 µs a chunk (hundreds of µs a request), the largest per-chunk cost of the relay.
 */
function legBounds(
  limits: Pick<ChatLimits, "total_timeout_ms" | "idle_timeout_ms">,
  deadline: number,
  watch: Pick<ReturnType<typeof watchFailure>, "fail">,
): { touch(): void; clear(): void } {
  const totalTimer = setTimeout(
    () =>
      watch.fail(
        new ServiceError(
          "upstream_timeout",
          `the request did not finish within ${limits.total_timeout_ms} ms; retry`,
        ),
      ),
    Math.max(0, deadline - Date.now()),
  );
  const idleMs = limits.idle_timeout_ms;
  let idleTimer: NodeJS.Timeout | undefined;
  let lastChunkAt = 0;
  const onIdle = () => {
    const quiet = Date.now() - lastChunkAt;
    if (quiet < idleMs) {
      idleTimer = setTimeout(onIdle, idleMs - quiet);
      return;
    }
    watch.fail(
      new ServiceError("upstream_timeout", `the engine sent nothing for ${idleMs} ms; retry`),
    );
  };
  return {
    touch: () => {
      lastChunkAt = Date.now();
      idleTimer ??= setTimeout(onIdle, idleMs);
    },
    clear: () => {
      clearTimeout(totalTimer);
      clearTimeout(idleTimer);
    },
  };
}

/**
 * Sends the request upstream and asks the master for its task, in the order that costs the request
 * least; returns both promises.
 */
function dispatch(
  ctx: ChatContext,
  request: RequestContext,
  { target, body, obs }: LegSpec,
  leg: { readonly abort: UpstreamAbort; readonly watch: ReturnType<typeof watchFailure> },
) {
  const { limited, commandId } = request;
  // The upstream request leaves first; the master creates the task while the engine starts working.
  // The command waits until the request is on the wire: a new connection to the engine (llama-server
  // closes one after each stream) takes an event-loop turn, and on the master node the command runs
  // synchronously, so starting it at once would put its work ahead of the request. It then waits
  // for the end of that turn (TaskReports), behind the other requests of a burst.
  // A token with limits is the exception: the master admits its task (or refuses it, 429) before
  // the engine sees the request, at the cost of one round trip to the master.
  let sent!: () => void;
  const onWire = new Promise<void>((r) => (sent = r));
  if (obs) void onWire.then(() => obs.event({ type: "sent", at: preciseNow() }));
  // The engine keeps a resumable stream under the command id (never the client's conversation
  // id: two tokens' conversations must not meet in one engine's table).
  const headers = request.resumable
    ? { ...ctx.o.engineHeaders?.(target.instance.instance_id), "x-conversation-id": commandId }
    : ctx.o.engineHeaders?.(target.instance.instance_id);
  const send = () =>
    postUpstream(`${target.endpoint}${request.endpoint.path}`, JSON.stringify(body), {
      abort: leg.abort,
      onSent: sent,
      headers,
      connectTimeoutMs: ctx.limits.connect_timeout_ms,
    });
  const createTask = () =>
    ctx.reports.create({
      type: "CreateTask",
      command_id: commandId,
      model_id: target.instance.model_id,
      instance_id: target.instance.instance_id,
      ...(limited ? { token: { name: limited.name, limits: limited.limits! } } : {}),
    });
  let upstreamP: Promise<IncomingMessage>;
  let taskP: ReturnType<typeof createTask>;
  if (limited) {
    taskP = createTask();
    // A request that failed while it waited for admission never reaches the engine.
    upstreamP = taskP.then(() => {
      if (leg.watch.failure) throw leg.watch.failure;
      return send();
    });
  } else {
    upstreamP = send();
    taskP = onWire.then(createTask);
  }
  return { upstreamP, taskP };
}

/**
 * The client of a resumable stream left this gateway: the engine's generation is cancelled (DELETE
 * /v1/stream), at once when the gateway made the conversation id, else after chat.resume_grace_ms
 * unless some gateway reads the stream again meanwhile.
 */
function leaveStream(ctx: ChatContext, request: RequestContext, target: ReadyInstance): void {
  const { commandId } = request;
  const cancel = () =>
    void engineStreamCall(
      ctx,
      { endpoint: target.endpoint, instanceId: target.instance.instance_id, commandId },
      { method: "DELETE" },
    ).then(
      (res) => res.resume(),
      (e: Error) =>
        ctx.o.log.debug({ command: commandId, err: e.message }, "cancelling a left stream failed"),
    );
  const grace = ctx.limits.resume_grace_ms;
  if (!request.conversation?.clientSupplied || grace === 0) return cancel();
  const timer = setTimeout(() => {
    off();
    cancel();
  }, grace);
  timer.unref();
  const off = ctx.streams.onResumed(commandId, () => clearTimeout(timer));
}

/** Tells the master a request's task failed (best effort: the task expires otherwise). */
function failTask(cluster: Pick<ClusterView, "command">, taskId: TaskId): void {
  cluster.command({ type: "FailTask", task_id: taskId, reason: "request failed" }).catch(() => {});
}

/**
 * A task the master opens after its request failed is closed too: it would hold one of its token's
 * concurrent places (and the master's table) until it expired.
 */
function failLateTask(
  cluster: Pick<ClusterView, "command">,
  task: Promise<{ readonly task_id?: TaskId | undefined }>,
): void {
  void task.then(
    (r) => r.task_id && failTask(cluster, r.task_id),
    () => {},
  );
}

/** The observer's `routed` event: the instance, its rank-0 node and engine endpoint. */
function routedEvent(target: ReadyInstance): Extract<ChatEvent, { type: "routed" }> {
  return {
    type: "routed",
    at: preciseNow(),
    instanceId: target.instance.instance_id,
    nodeId: target.instance.assignments.find((a) => a.rank === 0)?.node_id,
    endpoint: target.endpoint,
  };
}

/** Whether the client has left (its disconnect seen by a leg, or the response already destroyed). */
export function clientClosed(c: Context, request: RequestContext): boolean {
  return request.clientGone || (nodePair(c)?.outgoing.destroyed ?? false);
}
