// POST /v1/chat/completions and GET /v1/models: OpenAI-compatible, routed to the least-loaded ready
// instance of the model (balancing.ts; a model not ready yet answers a retryable 404, readiness.ts)
// and proxied to its rank-0 llama-server. Every way a request can end is typed (docs/api.md):
// - the client's mistakes, found here or by the engine, are 400 invalid_request;
// - a lost instance (TaskFailed, its deletion, its node leaving, or the engine connection breaking)
//   is 500 instance_lost/task_failed, a master failover 503 session_changed;
// - every wait on the engine is bounded (connect, silence between chunks, total): 504 upstream_timeout.
// Streams forward only complete SSE events; once the 200 is sent, an error ends the stream with one
// `data: {"error": ...}` event in the same envelope, never glued to a half-written event. A stream
// that opted in to migration (chat.migrate_streams, `x-ic-migrate: 1`) and loses its instance goes on
// instead, once, on another ready instance, as the same completion (migration.ts).
import { randomUUID } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import type { Context, Hono } from "hono";
import type { z } from "zod";
import {
  ChatRequestSchema,
  CompletionRequestSchema,
  EmbeddingRequestSchema,
  errorBody,
  httpStatusFor,
  ServiceError,
} from "@ic/protocol";
import type {
  ChatEvent,
  ChatObserver,
  CommandId,
  ControlState,
  EngineTimings,
  Instance,
  ModelRecord,
  SessionId,
  TaskId,
} from "@ic/protocol";
import type { Logger } from "@ic/log";
import {
  mayUseModel,
  modelForbidden,
  nodePair,
  parseJson,
  requestHeader,
  requestToken,
  watchClient,
} from "@ic/http";
import {
  postUpstream,
  readAll,
  SseRelay,
  UpstreamAbort,
  UpstreamConnectTimeout,
} from "../upstream.ts";
import type { ClusterView, PeerView } from "@ic/protocol";
import { prefixKey } from "../prefix-key.ts";
import { chooseInstance } from "../balancing.ts";
import { outstandingByInstance, RequestLoad } from "../request-load.ts";
import { notServableError, readiness, readyModels } from "../readiness.ts";
import type { ReadyInstance } from "../readiness.ts";
import { engineFailure } from "../engine-errors.ts";
import { TaskReports } from "../task-reports.ts";
import type { ApiToken } from "@ic/http";
import {
  ContinuationRewriter,
  continuationRequest,
  includesUsage,
  migrationWanted,
  Transcript,
} from "../migration.ts";
import type { MigrationOutcome, MigrationReport, StreamSoFar } from "../migration.ts";

type ChatRequest = z.output<typeof ChatRequestSchema>;
/** What the chat and the text completion endpoints share: the fields the gateway reads. */
type InferenceRequest = {
  model: string;
  stream?: boolean | undefined;
  max_tokens?: number | undefined;
  max_completion_tokens?: number | undefined;
} & Record<string, unknown>;

/** One OpenAI inference endpoint: how its body is checked and where it goes on the engine. */
interface Endpoint {
  readonly path: "/v1/chat/completions" | "/v1/completions" | "/v1/embeddings";
  readonly schema: z.ZodType<InferenceRequest>;
  /** The command id's prefix (OpenAI's: `chatcmpl-`, `cmpl-`; `emb-` for the trace only). */
  readonly idPrefix: string;
  /** Served by embedding instances (placed with `embeddings: true`), not by generating ones. */
  readonly embeddings: boolean;
}

const ENDPOINTS: readonly Endpoint[] = [
  {
    path: "/v1/chat/completions",
    schema: ChatRequestSchema,
    idPrefix: "chatcmpl-",
    embeddings: false,
  },
  {
    path: "/v1/completions",
    schema: CompletionRequestSchema,
    idPrefix: "cmpl-",
    embeddings: false,
  },
  {
    path: "/v1/embeddings",
    schema: EmbeddingRequestSchema,
    idPrefix: "emb-",
    embeddings: true,
  },
];

/** Whether an instance is of the kind an endpoint needs (embedding instances serve embeddings only). */
const servesKind = (i: ReadyInstance, embeddings: boolean) =>
  (i.instance.embeddings === true) === embeddings;

/** A model served, but not by instances of the kind this endpoint needs. */
function wrongKind(model: string, endpoint: Endpoint): ServiceError {
  return new ServiceError(
    "invalid_request",
    endpoint.embeddings
      ? `${model} has no instance placed for embeddings: place one with "embeddings": true (ic place ${model} --embeddings)`
      : `${model} is placed for embeddings only (its instances run with --embeddings): use /v1/embeddings, or place an instance without "embeddings"`,
    { details: { model, embeddings: endpoint.embeddings } },
  );
}

/** Bounds of one request; the config's `chat` section (defaults there). */
export interface ChatLimits {
  /** Given to requests that set neither max_tokens nor max_completion_tokens. */
  readonly defaultMaxTokens: number;
  readonly connectTimeoutMs: number;
  readonly idleTimeoutMs: number;
  readonly totalTimeoutMs: number;
  /** Streams go on elsewhere when their instance is lost (chat.migrate_streams; a header overrides). */
  readonly migrateStreams: boolean;
  /**
   * With several ready instances, a conversation's requests go to the same one while its load stays
   * within 1.25 times the mean or the mean plus 2 (chat.prefix_routing; prefix-key.ts, balancing.ts).
   */
  readonly prefixRouting: boolean;
}

export const DEFAULT_CHAT_LIMITS: ChatLimits = {
  defaultMaxTokens: 2048,
  connectTimeoutMs: 5000,
  idleTimeoutMs: 75_000,
  totalTimeoutMs: 900_000,
  migrateStreams: false,
  prefixRouting: true,
};

export interface ChatOptions {
  readonly cluster: ClusterView;
  readonly log: Logger;
  readonly limits?: Partial<ChatLimits> | undefined;
  /**
   * Called once per request as it arrives; the observer it returns (if any) sees the request's
   * events in order (tracing and metrics subscribe here). Returning undefined costs nothing.
   */
  readonly observe?: (r: { commandId: CommandId; receivedAt: number }) => ChatObserver | undefined;
  /** Extra headers for an instance's engine: its API key (only gateways may talk to engines). */
  readonly engineHeaders?: (instanceId: string) => Record<string, string>;
  /** This gateway's requests in flight (shared with the node's heartbeat and GET /state). */
  readonly load?: RequestLoad;
  /** Each stream migration's outcome and duration (metrics subscribe here). */
  readonly onMigration?: (m: MigrationReport) => void;
}

/** Wall-clock ms with sub-ms precision (Chrome traces want microseconds). */
export const preciseNow = (): number => performance.timeOrigin + performance.now();

const TIMINGS = Buffer.from('"timings"');
const DATA = Buffer.from("data: ");

/** Prompt plus completion tokens of a request, from the engine's usage (else its timings). */
function tokensUsed(
  usage: { prompt_tokens?: number; completion_tokens?: number } | undefined,
  timings: EngineTimings | undefined,
): number | undefined {
  if (usage?.prompt_tokens !== undefined || usage?.completion_tokens !== undefined)
    return (usage.prompt_tokens ?? 0) + (usage.completion_tokens ?? 0);
  if (!timings) return undefined;
  return (timings.cache_n ?? 0) + (timings.prompt_n ?? 0) + (timings.predicted_n ?? 0);
}

/** The timings and usage of the last event in `buf` that has them (llama-server's final chunk). */
function engineReport(buf: Buffer): Extract<ChatEvent, { type: "engine" }> | undefined {
  const at = buf.lastIndexOf(TIMINGS);
  if (at < 0) return undefined;
  const start = buf.lastIndexOf(DATA, at);
  const end = buf.indexOf("\n", at);
  try {
    const json = JSON.parse(buf.subarray(start + 6, end < 0 ? buf.length : end).toString()) as {
      timings?: EngineTimings;
      usage?: { prompt_tokens?: number; completion_tokens?: number };
    };
    if (!json.timings) return undefined;
    return { type: "engine", at: preciseNow(), timings: json.timings, usage: json.usage };
  } catch {
    return undefined;
  }
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const MEDIA_PARTS = new Set(["image_url", "input_image", "image", "input_audio", "audio"]);

/**
 * The request's content problems llama-server would answer with a 500: a string that is not valid
 * Unicode (a lone surrogate), and image or audio parts for a model without a projector. The walk is
 * iterative (the body's depth is already bounded by the parse edge).
 */
export function contentProblem(
  body: InferenceRequest,
  model: ModelRecord | undefined,
): string | null {
  const stack: unknown[] = [body];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === "string") {
      if (LONE_SURROGATE.test(v))
        return "a string holds a lone UTF-16 surrogate (not valid Unicode)";
    } else if (Array.isArray(v)) {
      for (const x of v) stack.push(x);
    } else if (typeof v === "object" && v !== null) {
      for (const [k, x] of Object.entries(v)) stack.push(k, x);
    }
  }
  const messages = (body as Partial<ChatRequest>).messages;
  if (!model?.mmproj && messages) {
    for (const m of messages) {
      if (!Array.isArray(m.content)) continue;
      const media = m.content.find((p) => MEDIA_PARTS.has(p.type));
      if (media)
        return `${body.model} has no vision/audio projector: '${media.type}' content is not supported`;
    }
  }
  return null;
}

/**
 * The ways a request fails while it waits on the engine: its task failed, its instance was deleted
 * or lost a node, the session changed. `fail` adds the gateway's own reasons (timeouts). The first
 * reason wins. Task failures seen before the task id is known are remembered (the TaskFailed event
 * can overtake the CreateTask reply).
 */
function watchFailure(cluster: ClusterView, instance: Instance, session: SessionId | null) {
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

/**
 * The model is ready only on nodes that are draining, or on nodes this node has not heard (yet): a
 * retryable 404, as while it is starting.
 */
function unroutable(
  model: string,
  instances: readonly ReadyInstance[],
  state: ControlState,
  live: readonly PeerView[],
): ServiceError {
  const nodes = [
    ...new Set(
      instances.flatMap((i) =>
        i.instance.assignments.map((a) => state.members[a.node_id]?.name ?? a.node_id),
      ),
    ),
  ];
  const draining = live.some(
    (p) =>
      p.heartbeat.draining &&
      instances.some((i) =>
        i.instance.assignments.some((a) => a.peer_key === p.heartbeat.peer_key),
      ),
  );
  return draining
    ? new ServiceError(
        "model_not_ready",
        `${model} is served only on nodes that are draining (${nodes.join(", ")}) and take no new requests; retry`,
        { retryAfterS: 2, details: { model, phase: "draining", nodes } },
      )
    : new ServiceError(
        "model_not_ready",
        `${model} is served only on nodes this node has not heard from within the liveness timeout (${nodes.join(", ")}); retry`,
        { retryAfterS: 1, details: { model, phase: "unheard", nodes } },
      );
}

/** What every try of one request shares. */
interface RequestContext {
  readonly body: InferenceRequest;
  /** The engine's endpoint for it (the same path as the request's). */
  readonly path: Endpoint["path"];
  /** An embeddings request: only embedding instances serve it, and its answer keeps no id. */
  readonly embeddings: boolean;
  /** The token, when it has limits: its task is admitted by the master before the engine sees it. */
  readonly limited: ApiToken | undefined;
  /** Whether the tokens a request used are reported (the token has tokens_per_minute). */
  readonly countTokens: boolean;
  /** The end of the request's total bound (chat.total_timeout_ms from its arrival). */
  readonly deadline: number;
  /** A chat stream that opted in to migration (chat.migrate_streams or `x-ic-migrate: 1`). */
  readonly migrate: boolean;
  /** The instances tried so far (a retry or a migration goes to another). */
  readonly tried: Set<string>;
  /** What the engine's prompt cache could share with this conversation's other requests. */
  readonly prefixKey: string | undefined;
  clientGone: boolean;
}

/** One request to an engine (a try, or a stream's continuation), once its answer's headers came. */
interface Leg {
  readonly instanceId: string;
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
  /** Ends the leg's bookkeeping, once: load, timers, watches, and its task (finished or failed). */
  close(ok: boolean, tokens?: number): void;
}

/** The client's end of a stream. */
interface Sink {
  write(b: Buffer): void;
  end(): void;
  /** What the route returns: the Node response was written directly, or a web stream. */
  readonly response: Response;
}

/**
 * Sends the stream's 200 and headers. Under @hono/node-server the events go straight to the Node
 * response; elsewhere through a web stream, whose cancel is the client going away.
 */
function openSink(c: Context, headers: Record<string, string>, onCancel: () => void): Sink {
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
      end: () => outgoing.end(),
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

/** Whether the client has left (its disconnect seen by a leg, or the response already destroyed). */
function clientClosed(c: Context, request: RequestContext): boolean {
  return request.clientGone || (nodePair(c)?.outgoing.destroyed ?? false);
}

/**
 * Relays a leg's SSE answer through `relay` (whole events only, ids rewritten) to `to.write`, and
 * calls `to.ended` once: without an error at the engine's end (or after a client disconnect), else
 * with what ended it (the engine's error event, a broken stream, the leg's failure watch).
 */
function relayLeg(
  leg: Leg,
  relay: SseRelay,
  model: string,
  to: { write(out: Buffer): void; ended(err?: ServiceError): void },
): void {
  const { upstream } = leg;
  let done = false;
  const end = (err?: ServiceError) => {
    if (done) return;
    done = true;
    to.ended(err);
  };
  const broken = (why: string) =>
    new ServiceError("instance_lost", `the engine stream broke ${why}; retry`);
  void leg.watch.failed.then((e) => end(e));
  upstream.on("data", (chunk: Buffer) => {
    if (done) return;
    leg.touch();
    const r = relay.push(chunk);
    if (r.out) to.write(r.out);
    if (r.error !== undefined) end(engineFailure(safeCode(r.error), r.error, model));
  });
  upstream.on("end", () => end(relay.pendingBytes > 0 ? broken("inside an event") : undefined));
  upstream.on("error", (e) => end(leg.abort.aborted ? undefined : broken(`(${e.message})`)));
  upstream.on("close", () => {
    if (!upstream.complete) end(broken("before it completed"));
  });
}

/** A try failed before the client got a byte of it: another instance may serve the request. */
class BeforeFirstByte extends Error {
  constructor(readonly error: ServiceError) {
    super(error.message);
  }
}

/** Losses a retry on another instance can mend (not a timeout, a client mistake or a session change). */
const RETRY_ON: ReadonlySet<string> = new Set(["instance_lost", "task_failed"]);

/** The typed error for a failed connection or a broken response (never a client mistake). */
function connectionError(e: unknown, model: string): ServiceError {
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

export function chatRoutes(app: Hono, o: ChatOptions): void {
  /** Requests this gateway sent, until they end: what balancing counts. */
  const load = o.load ?? new RequestLoad();
  /** CreateTask per event-loop turn, FinishTask with the next of them (task-reports.ts). */
  const reports = new TaskReports(o.cluster);

  app.get("/v1/models", (c) => {
    // Only models with a ready instance (the same test the chat route applies) that the token may use.
    const token = requestToken(c);
    return c.json({
      object: "list",
      data: readyModels(o.cluster.snapshot())
        .filter((id) => mayUseModel(token, id))
        .map((id) => ({
          id,
          object: "model",
          created: 0,
          owned_by: "cluster",
        })),
    });
  });

  // OpenAI's models.retrieve: the model's entry when it would be listed; else why not, as chat says it
  // (a model the token may not use is 403 before anything is looked up). Ids hold a slash (org/name);
  // an encoded one (%2F) is the same id (hono decodes the parameter).
  app.get("/v1/models/:id{.+}", (c) => {
    const id = c.req.param("id");
    const token = requestToken(c);
    if (token && !mayUseModel(token, id)) throw modelForbidden(token, id);
    const ready = readiness(o.cluster.snapshot(), id, Date.now());
    if (ready.kind !== "ready") throw notServableError(id, ready);
    return c.json({ id, object: "model", created: 0, owned_by: "cluster" });
  });

  const limits: ChatLimits = { ...DEFAULT_CHAT_LIMITS, ...o.limits };

  for (const endpoint of ENDPOINTS)
    app.post(endpoint.path, async (c) => {
      const receivedAt = preciseNow();
      // 32 characters after the prefix, like llama-server's own ids (see the streaming rewrite).
      const commandId = `${endpoint.idPrefix}${randomUUID().replaceAll("-", "")}` as CommandId;
      const obs = o.observe?.({ commandId, receivedAt });
      if (!obs) return handle(c, commandId, undefined, endpoint);
      try {
        return await handle(c, commandId, obs, endpoint);
      } catch (e) {
        const err = e instanceof ServiceError ? e : undefined;
        obs.event({
          type: "end",
          at: preciseNow(),
          ok: false,
          status: err ? httpStatusFor(err.code) : 500,
          code: err?.code ?? "internal",
          message: err?.message,
        });
        throw e;
      }
    });

  async function handle(
    c: Context,
    commandId: CommandId,
    obs: ChatObserver | undefined,
    endpoint: Endpoint,
  ) {
    const body = await parseJson(c, endpoint.schema);
    const token = requestToken(c);
    obs?.event({
      type: "validated",
      at: preciseNow(),
      model: body.model,
      stream: body.stream === true,
      token: token?.name,
    });
    // Before the model is looked up: a token learns nothing of the models it may not use.
    if (token && !mayUseModel(token, body.model)) throw modelForbidden(token, body.model);
    const limited = token?.limits && Object.keys(token.limits).length > 0 ? token : undefined;
    const countTokens = limited?.limits?.tokens_per_minute !== undefined;
    const cluster = o.cluster;
    // A node that has not joined a session yet (just started, or between sessions) knows nothing
    // of the cluster's models: neither "not found" nor "not ready" would be true.
    if (!cluster.synced)
      throw new ServiceError(
        "no_master",
        "this node has not joined a cluster session yet (starting, or an election is under way); retry",
        { retryAfterS: 1 },
      );
    const snap = cluster.snapshot();
    const ready = readiness(snap, body.model, Date.now());
    if (ready.kind !== "ready") throw notServableError(body.model, ready);
    const suited = ready.instances.filter((i) => servesKind(i, endpoint.embeddings));
    if (suited.length === 0) throw wrongKind(body.model, endpoint);
    // One look at the live peers per request: draining nodes and balancing read the same one.
    let live = o.cluster.livePeers();
    const open = routable(suited, live);
    if (open.length === 0) throw unroutable(body.model, suited, snap, live);
    const problem = contentProblem(body, snap.models[ready.instances[0]!.instance.model_id]);
    if (problem) throw new ServiceError("invalid_request", problem);
    if (
      !endpoint.embeddings &&
      body.max_tokens === undefined &&
      body.max_completion_tokens === undefined
    )
      body.max_tokens = limits.defaultMaxTokens;
    // One retry, on another ready instance, for a request that lost its instance before the client
    // got a byte (docs/api.md, "Retry before the first byte"); within the request's one total bound.
    const request: RequestContext = {
      body,
      path: endpoint.path,
      embeddings: endpoint.embeddings,
      limited,
      countTokens,
      deadline: Date.now() + limits.totalTimeoutMs,
      // Stream migration (docs/api.md): chat streams only, when the config or the request asks.
      migrate:
        endpoint.path === "/v1/chat/completions" &&
        body.stream === true &&
        migrationWanted(requestHeader(c, "x-ic-migrate"), limits.migrateStreams),
      tried: new Set<string>(),
      prefixKey: limits.prefixRouting && !endpoint.embeddings ? prefixKey(body) : undefined,
      clientGone: false,
    };
    const { tried } = request;
    let candidates: readonly ReadyInstance[] = open;
    for (;;) {
      const target = pick(candidates, live, request.prefixKey);
      tried.add(target.instance.instance_id);
      try {
        return await attempt(c, commandId, obs, request, target);
      } catch (e) {
        if (!(e instanceof BeforeFirstByte)) throw e;
        // The retry looks at the cluster as it is now (a node may have left or started draining).
        live = o.cluster.livePeers();
        const others =
          tried.size === 1 &&
          !request.clientGone &&
          RETRY_ON.has(e.error.code) &&
          Date.now() < request.deadline
            ? readyOthers(body.model, tried, request.embeddings, live)
            : [];
        if (others.length === 0) {
          o.log.debug(
            {
              command: commandId,
              model: body.model,
              instance: target.instance.instance_id,
              code: e.error.code,
              tries: tried.size,
            },
            "request lost its instance before the first byte; no other ready instance to retry on",
          );
          throw e.error;
        }
        obs?.event({
          type: "retry",
          at: preciseNow(),
          code: e.error.code,
          instanceId: target.instance.instance_id,
        });
        o.log.info(
          {
            command: commandId,
            model: body.model,
            instance: target.instance.instance_id,
            code: e.error.code,
            err: e.error.message,
          },
          "instance lost before the first byte; retrying on another ready instance",
        );
        candidates = others;
      }
    }
  }

  /**
   * The instance for a request (balancing.ts): its conversation's, within the load bound, or the
   * least-loaded, as this node sees the cluster now.
   */
  function pick(
    instances: readonly ReadyInstance[],
    live: readonly PeerView[],
    key: string | undefined,
  ) {
    const cluster = o.cluster;
    const self = live.find((p) => p.heartbeat.peer_key === cluster.peerKey);
    return chooseInstance(instances, {
      outstanding: outstandingByInstance(
        load.local(),
        live.map((p) => p.heartbeat),
        cluster.peerKey,
      ),
      selfPeerKey: cluster.peerKey,
      rttMs: (peer) => self?.heartbeat.links.find((l) => l.peer_key === peer)?.rtt_ms,
      prefixKey: key,
      boundLoad: load.local(),
    })!;
  }

  /** The model's ready instances other than those tried (none when it is not ready at all). */
  function readyOthers(
    model: string,
    tried: ReadonlySet<string>,
    embeddings: boolean,
    live: readonly PeerView[],
  ): ReadyInstance[] {
    const ready = readiness(o.cluster.snapshot(), model, Date.now());
    if (ready.kind !== "ready") return [];
    return routable(ready.instances, live).filter(
      (i) => !tried.has(i.instance.instance_id) && servesKind(i, embeddings),
    );
  }

  /**
   * Instances with no rank on a draining node (a draining node takes no new request) whose rank 0
   * runs on a node heard within the liveness timeout (its heartbeats carry the engine's key: a node
   * that has just joined has not heard every peer yet, and a silent one is about to be declared gone).
   */
  function routable(
    instances: readonly ReadyInstance[],
    live: readonly PeerView[],
  ): ReadyInstance[] {
    const heard = new Set(live.map((p) => p.heartbeat.peer_key));
    const draining = new Set(
      live.filter((p) => p.heartbeat.draining).map((p) => p.heartbeat.peer_key),
    );
    return instances.filter(
      (i) =>
        heard.has(i.instance.assignments.find((a) => a.rank === 0)?.peer_key ?? "") &&
        !i.instance.assignments.some((a) => draining.has(a.peer_key)),
    );
  }

  /**
   * One try of the request on `target`. Throws BeforeFirstByte for a failure before anything was
   * sent to the client (the caller may try another instance), any other error as it is.
   */
  async function attempt(
    c: Context,
    commandId: CommandId,
    obs: ChatObserver | undefined,
    request: RequestContext,
    target: ReadyInstance,
  ): Promise<Response> {
    const leg = await openLeg(c, commandId, obs, request, target, request.body);
    const headers: Record<string, string> = {
      "x-task-id": leg.taskId ?? "",
      "x-command-id": commandId,
      "x-instance-id": target.instance.instance_id,
    };
    if (leg.status !== 200 || !request.body.stream)
      return answerWhole(c, commandId, obs, request, leg, headers);
    return streamAnswer(c, commandId, obs, request, leg, headers);
  }

  /**
   * Sends the request (`body`) to `target`'s engine and waits for its answer's headers, with the
   * master's task, the failure watch and the request's bounds. Throws BeforeFirstByte when it fails
   * before then. `obs`: the observer of this leg's phases (none for a stream's continuation).
   */
  async function openLeg(
    c: Context,
    commandId: CommandId,
    obs: ChatObserver | undefined,
    request: RequestContext,
    target: ReadyInstance,
    body: Record<string, unknown>,
  ): Promise<Leg> {
    const { limited } = request;
    const cluster = o.cluster;
    obs?.event({
      type: "routed",
      at: preciseNow(),
      instanceId: target.instance.instance_id,
      nodeId: target.instance.assignments.find((a) => a.rank === 0)?.node_id,
      endpoint: target.endpoint,
    });
    const endLoad = load.begin(target.instance.instance_id);
    let closeTask: (() => void) | undefined;
    const session = cluster.sessionId;
    let taskId: TaskId | undefined;
    const watch = watchFailure(cluster, target.instance, session);
    const failed = watch.failed.then((e) => Promise.reject(e));
    failed.catch(() => {});
    const upstreamAbort = new UpstreamAbort();
    const onClientGone = () => {
      request.clientGone = true;
      upstreamAbort.abort(new Error("client disconnected"));
    };
    const abortUpstream = (why: string) => upstreamAbort.abort(new Error(why));
    const unwatchClient = watchClient(c, onClientGone);
    // Bounds: the whole request, and (once the engine answers) the silence between chunks.
    const totalTimer = setTimeout(
      () =>
        watch.fail(
          new ServiceError(
            "upstream_timeout",
            `the request did not finish within ${limits.totalTimeoutMs} ms; retry`,
          ),
        ),
      Math.max(0, request.deadline - Date.now()),
    );
    // The silence bound is checked lazily: a chunk only records its time, and the one timer, when it
    // fires, fails the request or sleeps for what is left. Re-arming a timer per chunk cost ~5 µs a
    // chunk (hundreds of µs a request), the largest per-chunk cost of the relay.
    const idleMs = limits.idleTimeoutMs;
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
    const touch = () => {
      lastChunkAt = Date.now();
      idleTimer ??= setTimeout(onIdle, idleMs);
    };
    let closed = false;
    const close = (ok: boolean, tokens?: number) => {
      if (closed) return;
      closed = true;
      endLoad();
      closeTask?.();
      watch.off();
      unwatchClient();
      clearTimeout(totalTimer);
      clearTimeout(idleTimer);
      if (!taskId) return;
      if (ok) reports.finish(taskId, tokens);
      else
        cluster
          .command({ type: "FailTask", task_id: taskId, reason: "request failed" })
          .catch(() => {});
    };

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
    const send = () =>
      postUpstream(`${target.endpoint}${request.path}`, JSON.stringify(body), {
        abort: upstreamAbort,
        onSent: sent,
        headers: o.engineHeaders?.(target.instance.instance_id),
        connectTimeoutMs: limits.connectTimeoutMs,
      });
    const createTask = () =>
      reports.create({
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
        if (watch.failure) throw watch.failure;
        return send();
      });
    } else {
      upstreamP = send();
      taskP = onWire.then(createTask);
    }
    upstreamP.catch(() => {});
    let upstream: IncomingMessage;
    try {
      const reply = await Promise.race([taskP, failed]);
      taskId = reply.task_id;
      if (taskId) {
        closeTask = load.taskOpened();
        watch.taskCreated(taskId);
        obs?.event({ type: "task", at: preciseNow(), taskId });
      }
      upstream = await Promise.race([upstreamP, failed]);
    } catch (e) {
      abortUpstream("request failed before the engine answered");
      close(false);
      // A task the master opens after the request failed is closed too: it would hold one of its
      // token's concurrent places (and the master's table) until it expired.
      if (!taskId)
        void taskP.then(
          (r) =>
            r.task_id &&
            cluster
              .command({ type: "FailTask", task_id: r.task_id, reason: "request failed" })
              .catch(() => {}),
          () => {},
        );
      throw new BeforeFirstByte(connectionError(watch.failure ?? e, request.body.model));
    }
    const status = upstream.statusCode ?? 502;
    obs?.event({ type: "headers", at: preciseNow(), status });
    touch();
    return {
      instanceId: target.instance.instance_id,
      upstream,
      status,
      taskId,
      watch,
      failed,
      abort: upstreamAbort,
      clientGone: onClientGone,
      touch,
      close,
    };
  }

  /** A non-streaming answer, or an engine's refusal (any status but 200), read whole. */
  async function answerWhole(
    c: Context,
    commandId: CommandId,
    obs: ChatObserver | undefined,
    request: RequestContext,
    leg: Leg,
    headers: Record<string, string>,
  ): Promise<Response> {
    const { body, countTokens } = request;
    let raw: Buffer;
    try {
      raw = await Promise.race([readAll(leg.upstream), leg.failed]);
    } catch (e) {
      leg.abort.abort(new Error("request failed while reading the engine's answer"));
      leg.close(false);
      throw new BeforeFirstByte(connectionError(leg.watch.failure ?? e, body.model));
    }
    if (leg.status !== 200) {
      leg.close(false);
      throw engineFailure(leg.status, raw.toString(), body.model);
    }
    let json: Record<string, unknown>;
    try {
      json = JSON.parse(raw.toString()) as Record<string, unknown>;
    } catch {
      leg.close(false);
      throw new ServiceError(
        "upstream_failed",
        `the engine for ${body.model} answered a body that is not JSON`,
      );
    }
    const j = json as {
      timings?: EngineTimings;
      usage?: { prompt_tokens?: number; completion_tokens?: number };
    };
    leg.close(true, countTokens ? tokensUsed(j.usage, j.timings) : undefined);
    if (obs) {
      const at = preciseNow();
      if (j.timings) obs.event({ type: "engine", at, timings: j.timings, usage: j.usage });
      obs.event({ type: "end", at, ok: true, status: 200, code: undefined, message: undefined });
    }
    // OpenAI's embedding list has no id; a completion's is the command id.
    return c.json(request.embeddings ? json : { ...json, id: commandId }, 200, headers);
  }

  /**
   * A streamed answer: complete SSE events are forwarded as they arrive (id rewritten in place).
   * Under @hono/node-server they go straight to the Node response; elsewhere through a web stream.
   * A stream that opted in to migration and loses its instance after its first byte goes on, once,
   * on another ready instance (migrate below); else an error ends it with one error event.
   */
  function streamAnswer(
    c: Context,
    commandId: CommandId,
    obs: ChatObserver | undefined,
    request: RequestContext,
    first: Leg,
    headers: Record<string, string>,
  ): Response {
    const { body, countTokens } = request;
    let current = first;
    const sink = openSink(c, headers, () => current.clientGone());
    let finished = false;
    // The last two forwarded buffers: the engine's timings are in its last event before [DONE], read
    // once at the end instead of searched for in every chunk.
    let lastOut: Buffer | undefined;
    let prevOut: Buffer | undefined;
    // Only a request that opted in reads what it relayed (to continue it elsewhere if need be).
    const transcript = request.migrate ? new Transcript() : undefined;
    let continuation: ContinuationRewriter | undefined;
    const finish = (err?: ServiceError) => {
      if (finished) return;
      finished = true;
      if (err) sink.write(Buffer.from(`data: ${JSON.stringify(errorBody(err))}\n\n`));
      // The client gets its last bytes before the task bookkeeping runs.
      sink.end();
      let report: Extract<ChatEvent, { type: "engine" }> | undefined;
      let tokens: number | undefined;
      if (continuation) {
        const { usage, timings } = continuation.report();
        if (timings) report = { type: "engine", at: preciseNow(), timings, usage };
        tokens = tokensUsed(usage, timings);
      } else if (obs || countTokens) {
        report = (lastOut && engineReport(lastOut)) ?? (prevOut && engineReport(prevOut));
        if (report) tokens = tokensUsed(report.usage, report.timings);
      }
      current.close(!err, tokens);
      if (!obs) return;
      if (report) obs.event(report);
      obs.event({
        type: "end",
        at: preciseNow(),
        ok: !err,
        status: 200,
        code: err?.code,
        message: err?.message,
      });
    };
    const ended = (leg: Leg, err?: ServiceError) => {
      if (finished || leg !== current) return;
      if (err && !leg.upstream.complete) leg.abort.abort(new Error(`request ended: ${err.code}`));
      if (err && transcript && !continuation && RETRY_ON.has(err.code) && !request.clientGone) {
        void migrate(leg, err, transcript.sofar);
        return;
      }
      finish(err);
    };
    /**
     * The stream's instance was lost (`err`) after the client got `sofar`: the request, continued
     * from there, goes on in this stream from another ready instance; else `err` ends it.
     */
    const migrate = async (lost: Leg, err: ServiceError, sofar: StreamSoFar) => {
      const outcome = migrationOutcomes(commandId, body.model, lost.instanceId, err);
      lost.close(false);
      const next = await openContinuation(c, commandId, request, sofar, outcome);
      if (!next) return finish(err);
      const { leg, to } = next;
      const rewriter = new ContinuationRewriter({
        id: commandId,
        created: sofar.created,
        model: sofar.model,
        migratedFrom: lost.instanceId,
        sentTokens: sofar.tokens,
        includeUsage: includesUsage(body),
      });
      current = leg;
      continuation = rewriter;
      let relayed = false;
      relayLeg(leg, new SseRelay(commandId), body.model, {
        write: (out) => {
          const text = rewriter.rewrite(out.toString());
          if (text.length === 0) return;
          sink.write(Buffer.from(text));
          if (relayed) return;
          relayed = true;
          outcome("migrated", { to, sent_tokens: sofar.tokens, max_tokens: next.maxTokens });
        },
        // A continuation that ends before its first event reached the client: the loss's error.
        ended: (e) => {
          if (relayed || finished) return ended(leg, e);
          outcome("failed", { to, err: e?.message });
          ended(leg, err);
        },
      });
    };

    let firstChunk = false;
    relayLeg(first, new SseRelay(commandId), body.model, {
      write: (out) => {
        sink.write(out);
        if (obs && !firstChunk) obs.event({ type: "first_chunk", at: preciseNow() });
        firstChunk = true;
        if (obs || countTokens) {
          prevOut = lastOut;
          lastOut = out;
        }
        transcript?.push(out);
      },
      ended: (err) => ended(first, err),
    });
    return sink.response;
  }

  /**
   * The continuation of a stream lost after the client got `sofar`: the request continued from
   * there (migration.ts), sent to another ready instance off draining nodes, within the request's
   * total bound, answered with a 200. Undefined (its outcome reported) when there is none.
   */
  async function openContinuation(
    c: Context,
    commandId: CommandId,
    request: RequestContext,
    sofar: StreamSoFar,
    outcome: ReturnType<typeof migrationOutcomes>,
  ): Promise<{ leg: Leg; to: string; maxTokens: number | undefined } | undefined> {
    const { body } = request;
    const plan = continuationRequest(body, sofar);
    if (!plan.ok) return void outcome("not_continuable", { why: plan.why });
    if (Date.now() >= request.deadline)
      return void outcome("failed", { why: "the request's total bound has passed" });
    const live = o.cluster.livePeers();
    const others = readyOthers(body.model, request.tried, request.embeddings, live);
    if (others.length === 0 || clientClosed(c, request)) return void outcome("no_instance");
    const target = pick(others, live, request.prefixKey);
    const to = target.instance.instance_id;
    request.tried.add(to);
    let leg: Leg;
    try {
      leg = await openLeg(c, commandId, undefined, request, target, plan.body);
    } catch (e) {
      return void outcome("failed", { to, err: (e as Error).message });
    }
    if (leg.status !== 200 || clientClosed(c, request)) {
      leg.abort.abort(new Error("the continuation was refused or the client left"));
      leg.close(false);
      return void outcome("failed", { to, status: leg.status });
    }
    return { leg, to, maxTokens: plan.maxTokens };
  }

  /** Reports a migration's outcome (onMigration, for metrics; a log line), timed from this call. */
  function migrationOutcomes(commandId: CommandId, model: string, from: string, err: ServiceError) {
    const lossAt = performance.now();
    return (result: MigrationOutcome, extra: Record<string, unknown> = {}) => {
      const ms = performance.now() - lossAt;
      reportMigration({ model, outcome: result, seconds: ms / 1000 });
      const fields = {
        command: commandId,
        model,
        from,
        code: err.code,
        outcome: result,
        ms: Math.round(ms),
        ...extra,
      };
      if (result === "migrated") o.log.info(fields, "stream migrated to another ready instance");
      else o.log.warn(fields, "stream lost its instance and was not migrated");
    };
  }

  function reportMigration(m: MigrationReport): void {
    try {
      o.onMigration?.(m);
    } catch (e) {
      o.log.warn({ err: (e as Error).message }, "the migration observer failed");
    }
  }
}

/** The numeric `code` of an engine error event (`{"error":{"code":400,...}}`), 500 when absent. */
function safeCode(text: string): number {
  try {
    const code = (JSON.parse(text) as { error?: { code?: unknown } }).error?.code;
    return typeof code === "number" ? code : 500;
  } catch {
    return 500;
  }
}
