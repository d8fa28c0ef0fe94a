// Making room for an on-demand load: when a model loaded on its first request does not fit, the least
// recently used idle on-demand instances are unloaded first -- never one with requests in flight and
// never an operator's placement (docs/capacity.md). Pure: what counts as in use and when each was
// last used come from the caller (the master's task table).
import type { ControlState, Instance, NodeId } from "@ic/protocol";
import { placeInCluster } from "./cluster.ts";
import type {
  ClusterPlacement,
  ClusterPlacementResult,
  ClusterRefusal,
  ClusterRequest,
  NodeReport,
} from "./cluster.ts";

/** How an instance is used now, as the master's task table knows it. */
export interface InstanceUse {
  /** Requests in flight on it. */
  readonly open: number;
  /** When a request on it last began or ended (ms); absent: never seen, so as old as it gets. */
  readonly lastUsedAt?: number;
}

/** An instance a load unloads, and why it was the one. */
export interface Unload {
  readonly instance_id: string;
  readonly model_id: string;
  readonly deployment_id: string;
  /** The members its ranks are on. */
  readonly node_ids: readonly NodeId[];
  readonly required_bytes: number;
  readonly last_used_at: number | null;
}

export type LoadPlan =
  | { readonly ok: true; readonly placement: ClusterPlacement; readonly unload: readonly Unload[] }
  | (ClusterRefusal & {
      /**
       * Set when unloading on-demand instances that have requests in flight would make room: how
       * many. The load may be asked again once they end (they are never unloaded while in use).
       */
      readonly busy?: number;
    });

/**
 * Instances that may be unloaded for room, least recently used first: those of a Placed on-demand
 * deployment with no request in flight. Ties by instance id, so the order is stable.
 */
export function unloadCandidates(
  state: ControlState,
  use: (instanceId: string) => InstanceUse | undefined,
): Unload[] {
  const out: Unload[] = [];
  for (const d of Object.values(state.deployments)) {
    if (!d.on_demand || d.status !== "Placed") continue;
    const inst = state.instances[d.instance_id];
    if (!inst) continue;
    const u = use(inst.instance_id);
    if ((u?.open ?? 0) > 0) continue;
    out.push(unloadOf(inst, d.deployment_id, u?.lastUsedAt ?? null));
  }
  return out.sort(
    (a, b) =>
      (a.last_used_at ?? -Infinity) - (b.last_used_at ?? -Infinity) ||
      a.instance_id.localeCompare(b.instance_id),
  );
}

function unloadOf(inst: Instance, deploymentId: string, lastUsedAt: number | null): Unload {
  return {
    instance_id: inst.instance_id,
    model_id: inst.model_id,
    deployment_id: deploymentId,
    node_ids: inst.assignments.map((a) => a.node_id),
    required_bytes: inst.assignments.reduce((s, a) => s + a.required_bytes, 0),
    last_used_at: lastUsedAt,
  };
}

/**
 * The state and reports as they will be once `gone` are unloaded: their reservations leave the
 * replica, and the memory their engines hold now is counted free on their nodes (an engine stops
 * within a second of its instance's deletion; the new one stages first).
 */
function without(
  state: ControlState,
  reports: readonly NodeReport[],
  gone: readonly Unload[],
): { state: ControlState; reports: NodeReport[] } {
  const instances = { ...state.instances };
  const freed = new Map<string, number>();
  for (const g of gone) {
    const inst = instances[g.instance_id];
    if (!inst) continue;
    delete instances[g.instance_id];
    for (const a of inst.assignments)
      freed.set(a.peer_key, (freed.get(a.peer_key) ?? 0) + a.required_bytes);
  }
  const out = reports.map((r) => {
    const f = freed.get(r.peer_key);
    if (!f || !r.telemetry) return r;
    const t = r.telemetry;
    const all = t.gpus.reduce((s, g) => s + (g.vram_total_bytes ?? 0), 0);
    return {
      ...r,
      telemetry: {
        ...t,
        memory_free_bytes: Math.min(t.memory_total_bytes, t.memory_free_bytes + f),
        gpus: t.gpus.map((g) =>
          g.vram_free_bytes === null || !g.vram_total_bytes || all === 0
            ? g
            : {
                ...g,
                vram_free_bytes: Math.min(
                  g.vram_total_bytes,
                  g.vram_free_bytes + (f * g.vram_total_bytes) / all,
                ),
              },
        ),
      },
    };
  });
  return { state: { ...state, instances }, reports: out };
}

/**
 * Where an on-demand load goes, and what it unloads: placed as it is if it fits; else after
 * unloading the fewest least recently used candidates that make it fit (then only those on the
 * nodes it lands on); else the refusal the cluster gives now, saying what unloading could not do.
 * Only a lack of memory is worth unloading for.
 */
export function planLoad(
  state: ControlState,
  reports: readonly NodeReport[],
  req: ClusterRequest,
  use: (instanceId: string) => InstanceUse | undefined,
): LoadPlan {
  const first = placeInCluster(state, reports, req);
  if (first.ok) return { ok: true, placement: first, unload: [] };
  if (first.code !== "insufficient_memory") return first;
  const candidates = unloadCandidates(state, use);
  for (let k = 1; k <= candidates.length; k++) {
    const gone = candidates.slice(0, k);
    const r = placeAfter(state, reports, req, gone);
    if (!r.ok) continue;
    // Unloading what is not on the nodes it lands on made no room for it: keep those.
    const landed = new Set(r.shares.map((s) => s.node_id));
    const needed = gone.filter((g) => g.node_ids.some((n) => landed.has(n)));
    if (needed.length < gone.length) {
      const fewer = placeAfter(state, reports, req, needed);
      if (fewer.ok) return { ok: true, placement: fewer, unload: needed };
    }
    return { ok: true, placement: r, unload: gone };
  }
  const busy = onDemandInUse(state, use);
  if (busy.length > 0 && placeAfter(state, reports, req, [...candidates, ...busy]).ok)
    return {
      ...first,
      message: `${first.message}; room frees once the requests in flight on ${busy.length} on-demand instance(s) end`,
      busy: busy.length,
    };
  const why =
    candidates.length > 0
      ? `; unloading every idle on-demand instance (${candidates.length}) would not make room either`
      : `; no idle on-demand instance to unload (${busy.length} with requests in flight; operators' placements are never unloaded)`;
  return { ...first, message: first.message + why };
}

/** Instances of Placed on-demand deployments with requests in flight (never unloaded for room). */
function onDemandInUse(
  state: ControlState,
  use: (instanceId: string) => InstanceUse | undefined,
): Unload[] {
  return Object.values(state.deployments).flatMap((d) => {
    const inst = state.instances[d.instance_id];
    if (!d.on_demand || d.status !== "Placed" || !inst) return [];
    const u = use(inst.instance_id);
    return (u?.open ?? 0) > 0 ? [unloadOf(inst, d.deployment_id, u?.lastUsedAt ?? null)] : [];
  });
}

function placeAfter(
  state: ControlState,
  reports: readonly NodeReport[],
  req: ClusterRequest,
  gone: readonly Unload[],
): ClusterPlacementResult {
  const v = without(state, reports, gone);
  return placeInCluster(v.state, v.reports, req);
}
