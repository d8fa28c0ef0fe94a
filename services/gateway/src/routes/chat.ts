// POST /v1/chat/completions, /v1/completions, /v1/embeddings and GET /v1/models: OpenAI-compatible,
// routed to the least-loaded ready instance of the model (balancing.ts; a model not ready yet answers
// a retryable 404, readiness.ts) and proxied to its rank-0 llama-server. A request goes through named
// steps (../chat/): validate (request.ts) -> route (routing.ts) -> task (leg.ts) -> relay and finish
// (relay.ts); a try lost before the client got a byte is retried once on another ready instance.
// Every way a request can end is typed (docs/api.md):
// - the client's mistakes, found here or by the engine, are 400 invalid_request;
// - a lost instance (TaskFailed, its deletion, its node leaving, or the engine connection breaking)
//   is 500 instance_lost/task_failed, a master failover 503 session_changed;
// - every wait on the engine is bounded (connect, silence between chunks, total): 504 upstream_timeout.
// Streams forward only complete SSE events; once the 200 is sent, an error ends the stream with one
// `data: {"error": ...}` event in the same envelope, never glued to a half-written event. A stream
// that opted in to migration (chat.migrate_streams, `x-ic-migrate: 1`) and loses its instance goes on
// instead, once, on another ready instance, as the same completion (migration.ts).
import { randomUUID } from "node:crypto";
import type { Context, Hono } from "hono";
import { ConversationIdSchema, httpStatusFor, kindOf, ServiceError } from "@ic/protocol";
import type { ChatObserver, CommandId } from "@ic/protocol";
import { mayUseModel, modelForbidden, parseJson, requestHeader, requestToken } from "@ic/http";
import { prefixKey } from "../prefix-key.ts";
import { promptBlocks } from "../prompt-blocks.ts";
import { PromptCacheMap } from "../prompt-cache.ts";
import { EngineSlots } from "../engine-slots.ts";
import { RequestLoad } from "../request-load.ts";
import { notServableError, readiness } from "../readiness.ts";
import type { ReadyInstance } from "../readiness.ts";
import { TaskReports } from "../task-reports.ts";
import { migrationWanted } from "../migration.ts";
import {
  ENDPOINTS,
  servesKind,
  wrongKind,
  DEFAULT_CHAT_LIMITS,
  preciseNow,
  contentProblem,
} from "../chat/request.ts";
import type {
  ChatCall,
  ChatContext,
  ChatOptions,
  Endpoint,
  InferenceRequest,
  RequestContext,
} from "../chat/request.ts";
import type { ApiToken } from "@ic/http";
import { unroutable, pick, readyOthers, routable } from "../chat/routing.ts";
import { BeforeFirstByte, RETRY_ON } from "../chat/leg.ts";
import { attempt, errorEvent } from "../chat/relay.ts";
import { loadOnDemand } from "../chat/on-demand.ts";
import { StreamDirectory } from "../streams/directory.ts";
import { inlineRemoteMedia } from "../chat/media.ts";
import { HandoverWatch, KvMoveStats, requestSeed } from "../chat/handover.ts";

/** An image fetched for a request (chat.fetch_image_urls): llama-server's own bounds for it. */
const IMAGE_MAX_BYTES = 10 * 1024 * 1024;
const IMAGE_FETCH_TIMEOUT_MS = 10_000;
import { resumeRoutes } from "./resume.ts";

export { DEFAULT_CHAT_LIMITS, preciseNow } from "../chat/request.ts";
export type { ChatLimits, ChatOptions } from "../chat/request.ts";

export function chatRoutes(app: Hono, o: ChatOptions): void {
  /** Requests this gateway sent, until they end: what balancing counts. */
  const load = o.load ?? new RequestLoad();
  /** CreateTask per event-loop turn, FinishTask with the next of them (task-reports.ts). */
  const reports = new TaskReports(o.cluster);
  const limits = { ...DEFAULT_CHAT_LIMITS, ...o.chat };
  const cache = o.promptCache ?? new PromptCacheMap();
  const ctx: ChatContext = {
    o,
    load,
    reports,
    limits,
    streams: o.streams ?? new StreamDirectory(),
    loads: new Map(),
    cache,
    slots: new EngineSlots({
      cache,
      headers: o.engineHeaders,
      connectTimeoutMs: limits.connect_timeout_ms,
    }),
    handovers: new HandoverWatch(() => o.cluster.livePeers()),
    kv: o.kvStats ?? new KvMoveStats(),
  };
  resumeRoutes(app, ctx);

  for (const endpoint of ENDPOINTS)
    app.post(endpoint.path, async (c) => {
      const receivedAt = preciseNow();
      // 32 characters after the prefix, like llama-server's own ids (see the streaming rewrite).
      const commandId = `${endpoint.idPrefix}${randomUUID().replaceAll("-", "")}` as CommandId;
      const obs = o.observe?.({ commandId, receivedAt, path: endpoint.path });
      if (!obs) return handle(ctx, { c, commandId, obs }, endpoint);
      try {
        return await handle(ctx, { c, commandId, obs }, endpoint);
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
}

/**
 * One request through its steps: validate (the body, the token), route (the ready instances that may
 * take it), then tries on the instance picked, with one retry elsewhere for a try lost before the
 * client got a byte (docs/api.md, "Retry before the first byte"), within the request's total bound.
 */
async function handle(ctx: ChatContext, call: ChatCall, endpoint: Endpoint) {
  const { body, limited } = await validate(call.c, call.obs, endpoint);
  const request = requestContext(ctx, call, { endpoint, body, limited });
  try {
    return await tries(ctx, request);
  } catch (e) {
    if (!request.early) throw e;
    return endEarly(request, e);
  }
}

/**
 * Route (loading the model first where on demand applies), then tries on the instance picked, with
 * one retry elsewhere for a try lost before the client got a byte.
 */
async function tries(ctx: ChatContext, request: RequestContext) {
  const { commandId, obs, body, endpoint } = request;
  let routed;
  try {
    routed = route(ctx, body, endpoint);
  } catch (e) {
    // Nothing serves it (404), or it is on its way (model_not_ready): on demand, it loads or is waited for.
    if (!(
      e instanceof ServiceError &&
      (e.code === "model_not_found" || e.code === "model_not_ready")
    ))
      throw e;
    if (!(await loadOnDemand(ctx, request))) throw e;
    routed = route(ctx, body, endpoint);
  }
  if (endpoint.kind === "generate")
    await inlineRemoteMedia(body, {
      fetch: ctx.limits.fetch_image_urls,
      hosts: ctx.limits.image_url_hosts,
      maxBytes: IMAGE_MAX_BYTES,
      timeoutMs: IMAGE_FETCH_TIMEOUT_MS,
    });
  let live = routed.live;
  const { tried } = request;
  let candidates: readonly ReadyInstance[] = routed.open;
  for (;;) {
    const target = pick(ctx, candidates, live, request);
    tried.add(target.instance.instance_id);
    try {
      return await attempt(ctx, request, target);
    } catch (e) {
      if (!(e instanceof BeforeFirstByte)) throw e;
      // The retry looks at the cluster as it is now (a node may have left or started draining).
      live = ctx.o.cluster.livePeers();
      const others =
        tried.size === 1 &&
        !request.clientGone &&
        RETRY_ON.has(e.error.code) &&
        Date.now() < request.deadline
          ? readyOthers(ctx, request, live)
          : [];
      if (others.length === 0) {
        ctx.o.log.debug(
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
      ctx.o.log.info(
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
 * A stream whose 200 went out while its model loaded: the error is its one event (in the stream's
 * dialect), as for any stream that fails after its first byte.
 */
function endEarly(request: RequestContext, e: unknown): Response {
  const sink = request.early!;
  const err =
    e instanceof ServiceError
      ? e
      : new ServiceError("internal", "the request failed while loading");
  sink.write(errorEvent(request.endpoint.style, err));
  sink.end();
  request.obs?.event({
    type: "end",
    at: preciseNow(),
    ok: false,
    status: 200,
    code: err.code,
    message: err.message,
  });
  return sink.response;
}

/** Validate: the body against the endpoint's schema, and the token's right to the model. */
async function validate(c: Context, obs: ChatObserver | undefined, endpoint: Endpoint) {
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
  return { body, limited };
}

/**
 * Route: the model's ready instances of the endpoint's kind that may take a request now (rank 0
 * heard; off draining nodes while any is), as this node sees the cluster; the typed refusal otherwise.
 */
function route(ctx: ChatContext, body: InferenceRequest, endpoint: Endpoint) {
  const cluster = ctx.o.cluster;
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
  const suited = ready.instances.filter((i) => servesKind(i, endpoint.kind));
  if (suited.length === 0)
    throw wrongKind(
      body.model,
      endpoint,
      ready.instances.map((i) => kindOf(i.instance)),
    );
  // One look at the live peers per request: draining nodes and balancing read the same one.
  const live = ctx.o.cluster.livePeers();
  const open = routable(suited, live);
  if (open.length === 0) throw unroutable(body.model, suited, snap);
  const problem = contentProblem(body, snap.models[ready.instances[0]!.instance.model_id]);
  if (problem) throw new ServiceError("invalid_request", problem);
  return { open, live };
}

/** What every try of the request shares (its bounds, its migration choice, the instances tried). */
function requestContext(
  ctx: ChatContext,
  call: ChatCall,
  {
    endpoint,
    body,
    limited,
  }: {
    readonly endpoint: Endpoint;
    readonly body: InferenceRequest;
    readonly limited: ApiToken | undefined;
  },
): RequestContext {
  const { c } = call;
  const conversation = conversationOf(c, endpoint, body);
  const routing = endpoint.kind === "generate" ? ctx.limits.prefix_routing : "off";
  const field = endpoint.maxTokensField;
  if (field && body[field] === undefined && body.max_completion_tokens === undefined)
    body[field] = ctx.limits.default_max_tokens;
  // Stream migration (docs/api.md): chat streams only, when the config or the request asks.
  const migrate =
    endpoint.path === "/v1/chat/completions" &&
    body.stream === true &&
    migrationWanted(requestHeader(c, "x-ic-migrate"), ctx.limits.migrate_streams);
  return {
    ...call,
    body,
    endpoint,
    limited,
    countTokens: limited?.limits?.tokens_per_minute !== undefined,
    deadline: Date.now() + ctx.limits.total_timeout_ms,
    migrate,
    kvSeed: kvSeedOf(ctx, endpoint, body, migrate || routing === "cache"),
    tried: new Set<string>(),
    prefixKey: routing !== "off" ? prefixKey(body) : undefined,
    prompt: routing === "cache" ? promptBlocks(body) : undefined,
    token: requestToken(c)?.name ?? null,
    conversation,
    resumable: conversation !== undefined,
    clientGone: false,
  };
}

/**
 * The seed that names the engine slot a chat request is served in, where caches move
 * (chat.kv_move): a migratable stream's (its cache goes with it), and a request routed on the
 * prompt caches (a drain moves its conversation's cache to the replica taking it). Other endpoints
 * keep their bodies as sent.
 */
function kvSeedOf(
  ctx: ChatContext,
  endpoint: Endpoint,
  body: InferenceRequest,
  wanted: boolean,
): number | undefined {
  if (!wanted || !ctx.limits.kv_move || !ctx.o.kvMove) return undefined;
  return endpoint.path === "/v1/chat/completions" ? requestSeed(body) : undefined;
}

/**
 * A stream's conversation id: the client's `X-Conversation-Id` (checked), else a new one. Only the
 * generating endpoints' streams have one (their engine keeps them readable again).
 */
function conversationOf(c: Context, endpoint: Endpoint, body: InferenceRequest) {
  if (body.stream !== true || endpoint.kind !== "generate" || !endpoint.usage) return undefined;
  const asked = requestHeader(c, "x-conversation-id");
  if (asked === undefined) return { id: `conv-${randomUUID()}`, clientSupplied: false };
  const parsed = ConversationIdSchema.safeParse(asked);
  if (!parsed.success)
    throw new ServiceError(
      "invalid_request",
      "X-Conversation-Id must be 1-128 visible ASCII characters",
      { details: { header: "x-conversation-id" } },
    );
  return { id: parsed.data, clientSupplied: true };
}
