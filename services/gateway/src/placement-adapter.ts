// Builds the placement input from this node's view (replica members + heartbeats) and maps the pure
// placement package's results onto assignments and typed ServiceErrors.
import { place, previews } from "@ic/placement";
import type { MemoryModel, ModelFacts, NodeShare, PlacementResult } from "@ic/placement";
import type { Assignment, ModelRecord, NodeId, Sharding } from "@ic/protocol";
import { ServiceError } from "@ic/protocol";
import type { ClusterView } from "./ports.ts";

export interface ViewNode {
  readonly node_id: NodeId;
  readonly peer_key: string;
  readonly name: string;
  /** null while the node's telemetry has not been heard (placement then reports info_pending). */
  readonly free_bytes: number | null;
  readonly total_bytes: number | null;
}

export interface PlacementView {
  readonly nodes: readonly ViewNode[];
  readonly links: readonly { readonly a: NodeId; readonly b: NodeId; readonly rtt_ms: number }[];
  /** True when some member's link measurements have not arrived yet. */
  readonly linksPending: boolean;
}

export function placementView(cluster: ClusterView, _now: number): PlacementView {
  const s = cluster.snapshot();
  const live = new Map(cluster.livePeers().map((p) => [p.heartbeat.peer_key, p.heartbeat]));
  const members = Object.values(s.members);
  const idOf = new Map(members.map((m) => [m.peer_key, m.node_id]));
  const nodes: ViewNode[] = members.map((m) => {
    const t = live.get(m.peer_key)?.telemetry ?? null;
    return {
      node_id: m.node_id,
      peer_key: m.peer_key,
      name: m.name,
      free_bytes: t ? t.memory_free_bytes : null,
      total_bytes: t ? t.memory_total_bytes : null,
    };
  });
  const seen = new Set<string>();
  const links: { a: NodeId; b: NodeId; rtt_ms: number }[] = [];
  let linksPending = false;
  for (const m of members) {
    const hb = live.get(m.peer_key);
    if (!hb) continue;
    if (members.length > 1 && hb.links.length === 0) linksPending = true;
    for (const l of hb.links) {
      const other = idOf.get(l.peer_key);
      if (!other) continue;
      const key = [m.node_id, other].sort().join("|");
      if (seen.has(key)) continue;
      seen.add(key);
      links.push({ a: m.node_id, b: other, rtt_ms: l.rtt_ms });
    }
  }
  return { nodes, links, linksPending };
}

export type Decision = { ok: true; assignments: Assignment[] } | { ok: false; error: ServiceError };

export interface DecideRequest {
  readonly minNodes: number;
  readonly sharding: Sharding;
  readonly excluded: readonly string[];
}

function facts(model: ModelRecord): ModelFacts {
  return {
    model_id: model.model_id,
    weight_bytes: model.bytes,
    layers: model.layers,
    context_length: model.context_length,
    embedding_length: model.embedding_length,
    head_count: model.head_count,
    head_count_kv: model.head_count_kv,
    supports_tensor: model.supports_tensor,
  };
}

function input(
  view: PlacementView,
  model: ModelRecord,
  excluded: readonly string[],
  memory: Partial<MemoryModel>,
) {
  return {
    nodes: view.nodes.map((n) => ({ node_id: n.node_id, name: n.name, free_bytes: n.free_bytes })),
    links: view.links,
    linksPending: view.linksPending,
    model: facts(model),
    excluded,
    memory,
  };
}

function toAssignments(view: PlacementView, shares: readonly NodeShare[]): Assignment[] {
  const peer = new Map<string, string>(view.nodes.map((n) => [n.node_id, n.peer_key]));
  return shares.map((s) => ({
    node_id: s.node_id as NodeId,
    peer_key: peer.get(s.node_id)!,
    rank: s.rank,
    ...(s.layers !== undefined ? { layers: s.layers } : { fraction: s.fraction }),
    weight_bytes: Math.round(s.weight_bytes),
    required_bytes: Math.round(s.required_bytes),
  }));
}

function toError(r: Extract<PlacementResult, { ok: false }>): ServiceError {
  return new ServiceError(r.code, r.message, r.node_id ? { details: { node_id: r.node_id } } : {});
}

export function decide(
  view: PlacementView,
  model: ModelRecord,
  req: DecideRequest,
  memory: Partial<MemoryModel> = {},
): Decision {
  const r = place({
    ...input(view, model, req.excluded, memory),
    minNodes: req.minNodes,
    sharding: req.sharding,
  });
  return r.ok
    ? { ok: true, assignments: toAssignments(view, r.shares) }
    : { ok: false, error: toError(r) };
}

export function previewAll(
  view: PlacementView,
  model: ModelRecord,
  excluded: readonly string[],
  memory: Partial<MemoryModel> = {},
) {
  return previews(input(view, model, excluded, memory)).map((p) =>
    p.result.ok
      ? {
          sharding: p.sharding,
          nodes: p.nodes,
          ok: true as const,
          assignments: toAssignments(view, p.result.shares),
        }
      : {
          sharding: p.sharding,
          nodes: p.nodes,
          ok: false as const,
          error: { code: p.result.code, message: p.result.message },
        },
  );
}
