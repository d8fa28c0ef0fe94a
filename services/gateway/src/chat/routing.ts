// The route step: which ready instances may take a request (rank 0 heard; those off draining nodes
// and not retiring first, the others only while none of those is ready: make before break), the one
// it goes to (balancing.ts), and the typed answer when none may.
import { ServiceError } from "@ic/protocol";
import type { ControlState } from "@ic/protocol";
import type { PeerView } from "@ic/protocol";
import { chooseInstance } from "../balancing.ts";
import { outstandingByInstance } from "../request-load.ts";
import { readiness } from "../readiness.ts";
import type { ReadyInstance } from "../readiness.ts";
import { servesKind } from "./request.ts";
import type { ChatContext, RequestContext } from "./request.ts";

/**
 * The model is ready only on nodes this node has not heard (yet, or any more): a retryable 404, as
 * while it is starting.
 */
export function unroutable(
  model: string,
  instances: readonly ReadyInstance[],
  state: ControlState,
): ServiceError {
  const nodes = [
    ...new Set(
      instances.flatMap((i) =>
        i.instance.assignments.map((a) => state.members[a.node_id]?.name ?? a.node_id),
      ),
    ),
  ];
  return new ServiceError(
    "model_not_ready",
    `${model} is served only on nodes this node has not heard from within the liveness timeout (${nodes.join(", ")}); retry`,
    { retryAfterS: 1, details: { model, phase: "unheard", nodes } },
  );
}

/**
 * The instance for a request (balancing.ts): the one whose prompt cache holds most of its prompt,
 * else its conversation's, within the load bound, or the least-loaded, as this node sees the
 * cluster now. The prompt is recorded on the instance picked (prompt-cache.ts).
 */
export function pick(
  ctx: ChatContext,
  instances: readonly ReadyInstance[],
  live: readonly PeerView[],
  request: Pick<RequestContext, "prefixKey" | "prompt" | "prediction" | "kvSeed">,
) {
  const { prompt } = request;
  const target = choose(ctx, instances, live, request);
  if (prompt) {
    request.prediction = ctx.cache.record(target.instance.instance_id, prompt, request.kvSeed);
    ctx.slots.ask(target.instance.instance_id, target.endpoint);
    // An instance deleted since is forgotten (the map holds only instances this gateway used).
    const present = ctx.o.cluster.snapshot().instances;
    if (ctx.cache.size > Object.keys(present).length)
      ctx.cache.retain(new Set(Object.keys(present)));
  }
  return target;
}

function choose(
  ctx: ChatContext,
  instances: readonly ReadyInstance[],
  live: readonly PeerView[],
  { prefixKey, prompt }: Pick<RequestContext, "prefixKey" | "prompt">,
) {
  const cluster = ctx.o.cluster;
  const self = live.find((p) => p.heartbeat.peer_key === cluster.peerKey);
  // A prompt shorter than a block leaves nothing in a cache for the next one: it goes to the fewest
  // in flight, then the nearest, then the oldest (the cache ranking's ties sent every such prompt to
  // the roomiest replica).
  const uncacheable = prompt !== undefined && prompt.hashes.length === 0;
  return chooseInstance(instances, {
    outstanding: outstandingByInstance(
      ctx.load.local(),
      live.map((p) => p.heartbeat),
      cluster.peerKey,
    ),
    selfPeerKey: cluster.peerKey,
    rttMs: (peer) => self?.heartbeat.links.find((l) => l.peer_key === peer)?.rtt_ms,
    prefixKey: uncacheable ? undefined : prefixKey,
    // Consulted only with a prefix key.
    cache: prompt && {
      held: (id) => ctx.cache.reuse(id, prompt),
      promptChars: prompt.chars,
      displaced: (id) => ctx.cache.displaced(id, prompt),
      room: (id) => ctx.cache.room(id),
      pending: (id) => ctx.load.prefillAhead(id),
    },
    boundLoad: ctx.load.local(),
  })!;
}

/** The model's ready instances other than those tried (none when it is not ready at all). */
export function readyOthers(
  ctx: ChatContext,
  request: Pick<RequestContext, "body" | "tried" | "endpoint">,
  live: readonly PeerView[],
): ReadyInstance[] {
  const { tried } = request;
  const kind = request.endpoint.kind;
  const ready = readiness(ctx.o.cluster.snapshot(), request.body.model, Date.now());
  if (ready.kind !== "ready") return [];
  return routable(ready.instances, live).filter(
    (i) => !tried.has(i.instance.instance_id) && servesKind(i, kind),
  );
}

/**
 * Instances whose rank 0 runs on a node heard within the liveness timeout (its heartbeats carry the
 * engine's key: a node that has just joined has not heard every peer yet, and a silent one is about
 * to be declared gone), and of those the ones with no rank on a draining node and not retiring (a
 * scale-down's choice, deleted once its requests end: docs/capacity.md). Make before break: while
 * none of those is ready, the others still take requests -- a draining node serves until its
 * replacements are ready or its drain times out (docs/operations.md, "Draining").
 */
export function routable(
  instances: readonly ReadyInstance[],
  live: readonly PeerView[],
): ReadyInstance[] {
  const heard = new Set(live.map((p) => p.heartbeat.peer_key));
  const draining = new Set(
    live.filter((p) => p.heartbeat.draining).map((p) => p.heartbeat.peer_key),
  );
  const up = instances.filter((i) =>
    heard.has(i.instance.assignments.find((a) => a.rank === 0)?.peer_key ?? ""),
  );
  const staying = up.filter(
    (i) => !i.retiring && !i.instance.assignments.some((a) => draining.has(a.peer_key)),
  );
  return staying.length > 0 ? staying : up;
}
