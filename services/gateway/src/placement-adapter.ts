// Feeds this node's view (replica + live heartbeats) to the pure cluster placement of @ic/placement
// and maps its results onto assignments and typed ServiceErrors; the master re-checks the same way.
import { assignmentsOf, placeInCluster, previewCluster, refusalError } from "@ic/placement";
import type { MemoryModel, NodeCapacity, NodeReport, NodeShare } from "@ic/placement";
import type { Assignment, ControlState, ModelRecord, ServiceError, Sharding } from "@ic/protocol";
import type { ClusterView } from "@ic/protocol";

export interface PlacementView {
  readonly state: ControlState;
  /** Latest heartbeat of every live peer, self included. */
  readonly reports: readonly NodeReport[];
}

export function placementView(cluster: ClusterView): PlacementView {
  return { state: cluster.snapshot(), reports: cluster.livePeers().map((p) => p.heartbeat) };
}

export type Decision =
  { ok: true; assignments: Assignment[]; contextSize: number } | { ok: false; error: ServiceError };

export interface DecideRequest {
  readonly minNodes: number;
  readonly sharding: Sharding;
  readonly excluded: readonly string[];
}

function toAssignments(view: PlacementView, shares: readonly NodeShare[]): Assignment[] {
  return assignmentsOf(view.state, shares);
}

export function decide(
  view: PlacementView,
  model: ModelRecord,
  req: DecideRequest,
  memory: Partial<MemoryModel> = {},
): Decision {
  const r = placeInCluster(view.state, view.reports, {
    model,
    minNodes: req.minNodes,
    sharding: req.sharding,
    excluded: req.excluded,
    memory,
  });
  return r.ok
    ? { ok: true, assignments: toAssignments(view, r.shares), contextSize: r.context_size }
    : { ok: false, error: refusalError(r) };
}

/** A node's capacity as /instance/previews shows it. */
function capacityEntry(c: NodeCapacity) {
  return {
    node_id: c.node_id,
    name: c.name,
    total_bytes: c.total_bytes,
    reported_free_bytes: c.reported_free_bytes,
    reserved_bytes: c.reserved_bytes,
    free_bytes: c.free_bytes,
    candidate: c.unavailable === null,
    ...(c.unavailable ? { unavailable: c.unavailable } : {}),
  };
}

export function previewAll(
  view: PlacementView,
  model: ModelRecord,
  excluded: readonly string[],
  memory: Partial<MemoryModel> = {},
) {
  const r = previewCluster(view.state, view.reports, { model, excluded, memory });
  return {
    nodes: r.capacities.map(capacityEntry),
    previews: r.previews.map((p) =>
      p.result.ok
        ? {
            sharding: p.sharding,
            nodes: p.nodes,
            ok: true as const,
            context_size: p.result.context_size,
            assignments: toAssignments(view, p.result.shares),
          }
        : {
            sharding: p.sharding,
            nodes: p.nodes,
            ok: false as const,
            error: {
              code: p.result.code,
              message: p.result.message,
              ...(p.result.node_id !== undefined ? { node_id: p.result.node_id } : {}),
              ...(p.result.health_code !== undefined ? { health_code: p.result.health_code } : {}),
            },
          },
    ),
  };
}
