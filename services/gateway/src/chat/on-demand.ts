// Models that load when asked (docs/capacity.md): a request for a registered model with no instance,
// where on demand applies, asks the master to load it (LoadModel: one placement however many ask) and
// waits within chat.load_wait_ms for a ready instance; a stream meanwhile gets its 200 and an SSE
// comment every LOAD_COMMENT_MS, so clients and proxies see it alive. It then goes on as any request,
// or fails with the typed error that says why (the placement's refusal, the runner's failure, the wait).
import { ServiceError } from "@ic/protocol";
import { servedOrLoading } from "@ic/state";
import type { InstanceKind, ModelRecord } from "@ic/protocol";
import { notServableError, readiness } from "../readiness.ts";
import type { Readiness } from "../readiness.ts";
import { openSink } from "./sink.ts";
import type { ChatContext, ChatLimits, Endpoint, RequestContext } from "./request.ts";
import { servesKind } from "./request.ts";
import { routable } from "./routing.ts";
import { nodePair } from "@ic/http";

/** Between two SSE comments on a stream that waits for its model to load. */
export const LOAD_COMMENT_MS = 2000;
/** How soon a load refused for room in use is asked again (requests end within about this). */
const LOAD_RETRY_MS = 250;
/** How often a waiting request looks at the replica again. */
const LOAD_POLL_MS = 100;

/** Whether a request may load `model`: its model.json's `on_demand`, else chat.on_demand. */
export function onDemand(model: ModelRecord | undefined, chat: ChatLimits): model is ModelRecord {
  return model !== undefined && (model.on_demand ?? chat.on_demand);
}

/** The keep_alive its on-demand instances get: its model.json's, else chat.keep_alive_ms. */
export function keepAliveFor(model: ModelRecord, chat: ChatLimits): number {
  return model.keep_alive_ms ?? chat.keep_alive_ms;
}

function askToLoad(ctx: ChatContext, model: ModelRecord, kind: InstanceKind): Promise<unknown> {
  const key = `${model.model_id}\u0000${kind}`;
  const loading = ctx.loads;
  let p = loading.get(key);
  if (!p) {
    p = ctx.o.cluster
      .command({
        type: "LoadModel",
        model_id: model.model_id,
        ...(kind !== "generate" ? { kind } : {}),
        keep_alive_ms: keepAliveFor(model, ctx.limits),
      })
      .finally(() => loading.delete(key));
    loading.set(key, p);
  }
  return p;
}

/** The model's instances of the endpoint's kind that a request may go to now, if any. */
function servable(ctx: ChatContext, modelId: string, endpoint: Endpoint): Readiness {
  const r = readiness(ctx.o.cluster.snapshot(), modelId, Date.now());
  if (r.kind !== "ready") return r;
  const suited = r.instances.filter((i) => servesKind(i, endpoint.kind));
  return routable(suited, ctx.o.cluster.livePeers()).length > 0 ? r : { kind: "absent" };
}

/**
 * Loads the request's model when on demand applies and nothing serves it (else returns false: the
 * caller answers as the spec says). Resolves once an instance may take the request; a stream has
 * its 200 by then if the load took longer than a comment's period (request.early). Throws the
 * typed error when the load is refused, fails, or outlasts chat.load_wait_ms.
 */
export async function loadOnDemand(ctx: ChatContext, request: RequestContext): Promise<boolean> {
  const { body, endpoint } = request;
  const model = ctx.o.cluster.snapshot().models[body.model];
  if (!onDemand(model, ctx.limits)) return false;
  const kind = endpoint.kind;
  const started = Date.now();
  const until = started + ctx.limits.load_wait_ms;
  let last: Readiness = { kind: "absent" };
  let commented = started;
  ctx.o.log.info({ model: body.model, kind, command: request.commandId }, "loading on demand");
  for (;;) {
    last = servable(ctx, body.model, endpoint);
    if (last.kind === "ready") return true;
    // A load that failed everywhere is not asked again here (a new placement or registration is).
    if (last.kind === "not_ready" && !last.retryable) throw notServableError(body.model, last);
    if (!servedOrLoading(ctx.o.cluster.snapshot(), body.model, kind)) {
      try {
        // Accepted: its events reach this node's replica within a moment; look again after a poll.
        await askToLoad(ctx, model, kind);
      } catch (e) {
        // No room until requests in flight on other on-demand instances end: ask again shortly.
        if (!(e instanceof ServiceError && e.details?.in_use_instances) || Date.now() >= until)
          throw e;
        last = {
          kind: "not_ready",
          message: e.message,
          retryable: true,
          retryAfterS: 1,
          details: {},
        };
        await sleep(LOAD_RETRY_MS);
      }
    }
    if (clientLeft(request))
      throw new ServiceError("unavailable", "the client left while its model was loading");
    const now = Date.now();
    if (now >= until) throw stillLoading(body.model, last, now - started);
    if (body.stream === true && now - commented >= LOAD_COMMENT_MS) {
      comment(ctx, request, last);
      commented = now;
    }
    await sleep(Math.min(LOAD_POLL_MS, until - now));
  }
}

function clientLeft(request: RequestContext): boolean {
  return request.clientGone || (nodePair(request.c)?.outgoing.destroyed ?? false);
}

/** A stream that waits: its 200 (first time) and one SSE comment saying how far the load is. */
function comment(ctx: ChatContext, request: RequestContext, r: Readiness): void {
  if (!request.early) {
    const headers: Record<string, string> = { "x-command-id": request.commandId };
    if (request.conversation) headers["x-conversation-id"] = request.conversation.id;
    request.early = openSink(request.c, headers, () => {
      request.clientGone = true;
    });
  }
  const what = r.kind === "not_ready" ? r.message : `${request.body.model} is being placed`;
  request.early.write(Buffer.from(`: loading: ${what.replaceAll("\n", " ")}\n\n`));
  ctx.o.log.debug({ model: request.body.model, command: request.commandId }, "still loading");
}

function stillLoading(model: string, r: Readiness, waitedMs: number): ServiceError {
  const phase = r.kind === "not_ready" ? `: ${r.message}` : "";
  return new ServiceError(
    "model_not_ready",
    `${model} is loading on demand but was not ready within ${Math.round(waitedMs / 1000)} s (chat.load_wait_ms)${phase}`,
    { retryable: true, retryAfterS: 5, details: { model, phase: "loading" } },
  );
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
