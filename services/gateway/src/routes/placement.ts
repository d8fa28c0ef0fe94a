// POST /place_instance, GET /instance/previews, DELETE /instance/{id}: placement decided synchronously
// from this node's view (replica + heartbeats, instances already placed counted) with @ic/placement, then
// re-checked by the master, which settles races; the caller gets either refusal synchronously, typed.
import { randomUUID } from "node:crypto";
import type { Hono } from "hono";
import {
  InstanceIdSchema,
  keepAliveMs,
  PlaceRequestSchema,
  PreviewQuerySchema,
  requestedKind,
  ServiceError,
  toWireError,
} from "@ic/protocol";
import type {
  Instance,
  InstanceId,
  InstanceKind,
  ModelRecord,
  PlaceRequest,
  ScalePolicy,
} from "@ic/protocol";
import type { Logger } from "@ic/log";
import { parseJson, validationError } from "@ic/http";
import type { ClusterView } from "@ic/protocol";
import { placementView, decide, previewAll } from "../placement-adapter.ts";
import type { Decision, PlacementView } from "../placement-adapter.ts";
import type { MemoryModel } from "@ic/placement";
import { resolveNodeRefs } from "../node-refs.ts";

export interface PlacementRouteOptions {
  readonly cluster: ClusterView;
  readonly log: Logger;
  /** How long to wait for topology/memory info before answering 503 (spec: 15 s). */
  readonly infoPendingWaitMs: number;
  readonly now: () => number;
  readonly memory?: Partial<MemoryModel>;
  /** Whether a request loads this model when nothing serves it (the previews then say how). */
  readonly onDemand?: (model: ModelRecord) => boolean;
}

/**
 * What a request for an on-demand model would do now, as the master decides it (a dry-run
 * LoadModel): nothing (already loaded), or the nodes it lands on and the instances it unloads for
 * room ("would unload X on node-2"); or the refusal.
 */
async function onDemandPreview(cluster: ClusterView, model: ModelRecord) {
  const s = cluster.snapshot();
  const name = (id: string) => s.members[id]?.name ?? id;
  try {
    const reply = await cluster.command({
      type: "LoadModel",
      model_id: model.model_id,
      keep_alive_ms: 0,
      dry_run: true,
    });
    const events = reply.events ?? [];
    const placed = events.find((e) => e.type === "InstancePlaced");
    if (!placed) return { ok: true as const, loaded: true };
    const unload = events.flatMap((e) => {
      if (e.type !== "InstanceDeleted") return [];
      const inst = s.instances[e.instance_id];
      const nodes = inst?.assignments.map((a) => name(a.node_id)) ?? [];
      return [{ instance_id: e.instance_id, model_id: inst?.model_id ?? "", nodes }];
    });
    return {
      ok: true as const,
      loaded: false,
      nodes: placed.instance.assignments.map((a) => name(a.node_id)),
      unload,
      summary:
        unload.length === 0
          ? `would load on ${placed.instance.assignments.map((a) => name(a.node_id)).join(", ")}`
          : `would unload ${unload.map((u) => `${u.model_id} on ${u.nodes.join("+")}`).join(", ")}`,
    };
  } catch (e) {
    return { ok: false as const, error: toWireError(e) };
  }
}

function modelOrThrow(cluster: ClusterView, id: string): ModelRecord {
  const m = cluster.snapshot().models[id];
  if (!m) {
    throw new ServiceError(
      "model_not_found",
      `model ${id} is not registered in the cluster (no store host holds it)`,
      {
        details: { model_id: id },
      },
    );
  }
  return m;
}

/** Requests in flight per ready replica above which a set that follows load grows (scale_up_at). */
export const DEFAULT_SCALE_UP_AT = 4;

/**
 * A request with `max_replicas` follows load: its policy, and `replicas` set to where it starts
 * (`min_replicas`). `min_replicas` or `scale_up_at` alone is refused, as is min above max.
 */
function withScale(req: PlaceRequest): PlaceRequest & { scale?: ScalePolicy } {
  if (req.max_replicas === undefined) {
    if (req.min_replicas !== undefined || req.scale_up_at !== undefined)
      throw new ServiceError(
        "invalid_request",
        "request body: min_replicas and scale_up_at need max_replicas (the most replicas the load may grow to)",
      );
    return req;
  }
  const scale = {
    min_replicas: req.min_replicas ?? 1,
    max_replicas: req.max_replicas,
    up_at: req.scale_up_at ?? DEFAULT_SCALE_UP_AT,
  };
  if (scale.min_replicas > scale.max_replicas)
    throw new ServiceError(
      "invalid_request",
      `request body: min_replicas (${scale.min_replicas}) exceeds max_replicas (${scale.max_replicas})`,
      { details: { min_replicas: scale.min_replicas, max_replicas: scale.max_replicas } },
    );
  return { ...req, replicas: scale.min_replicas, scale };
}

function splitIds(v: string | undefined): string[] {
  return (v ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
}

export function placementRoutes(app: Hono, o: PlacementRouteOptions): void {
  const { cluster } = o;

  app.post("/place_instance", async (c) => {
    const req = withScale(await parseJson(c, PlaceRequestSchema));
    const kind = requestedKind(req.kind, req.embeddings);
    if (kind === null)
      throw new ServiceError(
        "invalid_request",
        `request body: kind "${req.kind}" contradicts "embeddings": true (the older way to ask for kind "embed"); send kind alone`,
        { details: { kind: req.kind, embeddings: req.embeddings } },
      );
    return c.json(await placeInstance(o, req, kind), 200);
  });

  app.get("/instance/previews", async (c) => {
    const parsed = PreviewQuerySchema.safeParse(c.req.query());
    if (!parsed.success) throw validationError(parsed.error, "query");
    const model = modelOrThrow(cluster, parsed.data.model_id);
    const view: PlacementView = placementView(cluster);
    const excluded = resolveNodeRefs(
      cluster.snapshot(),
      splitIds(parsed.data.excluded_node_ids),
      "excluded_node_ids",
    );
    const loads = o.onDemand?.(model) ? { on_demand: await onDemandPreview(cluster, model) } : {};
    return c.json({
      model_id: model.model_id,
      excluded_node_ids: excluded,
      ...previewAll(view, model, excluded, o.memory),
      ...loads,
    });
  });

  app.delete("/instance/:instance_id", async (c) => {
    const id = InstanceIdSchema.safeParse(c.req.param("instance_id"));
    if (!id.success) throw validationError(id.error, "instance_id");
    const reply = await cluster.command({ type: "DeleteInstance", instance_id: id.data });
    return c.json({ ok: true, index: reply.index, instance_id: id.data });
  });

  app.get("/instances", (c) => {
    const s = cluster.snapshot();
    return c.json({ instances: Object.values(s.instances) });
  });
}

/**
 * POST /place_instance: waits (up to info_pending_wait_ms) for a session and for every live node's
 * memory and links, then places the request's instances or answers the typed refusal.
 */
async function placeInstance(
  o: PlacementRouteOptions,
  req: PlaceRequest & { scale?: ScalePolicy },
  kind: InstanceKind,
) {
  const { cluster } = o;
  const deadline = o.now() + o.infoPendingWaitMs;
  // Info-pending: wait (up to the limit) for a session and for every live node's memory and links.
  for (;;) {
    if (!cluster.synced) {
      if (o.now() >= deadline) {
        throw new ServiceError(
          "info_pending",
          "this node has not joined a cluster session yet; retry in a few seconds",
        );
      }
    } else {
      const model = modelOrThrow(cluster, req.model_id);
      const excluded = resolveNodeRefs(cluster.snapshot(), req.excluded_nodes, "excluded_nodes");
      const view = placementView(cluster);
      const result = decide(
        view,
        model,
        { minNodes: req.min_nodes, sharding: req.sharding, excluded },
        o.memory,
      );
      if (result.ok) {
        const placed = await placeReplicas(o, { req, kind, model, excluded }, result);
        const first = placed[0]!;
        return {
          ok: true as const,
          index: first.index,
          instance: first.instance,
          ...(req.replicas > 1 ? { instances: placed.map((p) => p.instance) } : {}),
        };
      }
      if (result.error.code !== "info_pending" || o.now() >= deadline) throw result.error;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * Places the request's instances: the first as decided, each further replica on nodes none of the
 * earlier ones uses. All or none: a replica that does not fit takes back the ones placed, and the
 * refusal says which replica it was.
 */
async function placeReplicas(
  o: PlacementRouteOptions,
  asked: {
    req: PlaceRequest & { scale?: ScalePolicy };
    kind: InstanceKind;
    model: ModelRecord;
    excluded: readonly string[];
  },
  first: Extract<Decision, { ok: true }>,
): Promise<{ index: number; instance: Instance }[]> {
  const { req, kind, model, excluded } = asked;
  const set = req.replicas > 1 || req.scale ? `rs-${randomUUID()}` : undefined;
  const placed: { index: number; instance: Instance }[] = [];
  const used = new Set<string>();
  let decision: Decision = first;
  for (let k = 0; k < req.replicas; k++) {
    if (k > 0)
      decision = decide(
        placementView(o.cluster),
        model,
        { minNodes: req.min_nodes, sharding: req.sharding, excluded: [...excluded, ...used] },
        o.memory,
      );
    if (!decision.ok) {
      await takeBack(o, placed);
      const e = decision.error;
      throw new ServiceError(
        e.code,
        `replica ${k + 1} of ${req.replicas} (each on nodes the others do not use): ${e.message}`,
        { details: { ...(e.details ?? {}), replica: k + 1, replicas: req.replicas } },
      );
    }
    const instance: Instance = {
      instance_id: `i-${randomUUID()}` as InstanceId,
      model_id: model.model_id,
      sharding: req.sharding,
      ...(kind !== "generate" ? { kind } : {}),
      context_size: decision.contextSize,
      created_at: o.now(),
      assignments: decision.assignments,
    };
    let reply;
    try {
      reply = await o.cluster.command({
        type: "PlaceInstance",
        instance,
        deployment: {
          min_nodes: req.min_nodes,
          sharding: req.sharding,
          excluded_nodes: excluded as string[],
          ...(kind !== "generate" ? { kind } : {}),
          ...(set ? { replica_set: set } : {}),
          ...(req.keep_alive !== undefined ? { keep_alive_ms: keepAliveMs(req.keep_alive) } : {}),
          ...(req.scale ? { scale: req.scale } : {}),
        },
      });
    } catch (e) {
      await takeBack(o, placed);
      throw e;
    }
    for (const a of instance.assignments) used.add(a.node_id);
    placed.push({ index: reply.index, instance });
    o.log.info(
      {
        instance: instance.instance_id,
        model: model.model_id,
        nodes: instance.assignments.map((a) => a.node_id),
        ...(set ? { replica: k + 1, replicas: req.replicas, replica_set: set } : {}),
      },
      "instance placed",
    );
  }
  return placed;
}

/** Deletes the replicas of a placement that could not be completed (best effort, logged). */
async function takeBack(
  o: PlacementRouteOptions,
  placed: readonly { instance: Instance }[],
): Promise<void> {
  for (const p of placed)
    await o.cluster
      .command({ type: "DeleteInstance", instance_id: p.instance.instance_id })
      .catch((e: unknown) =>
        o.log.warn(
          { err: e, instance: p.instance.instance_id },
          "could not take back a replica of a refused placement",
        ),
      );
}
