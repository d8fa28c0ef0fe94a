// Builds the node's view documents from the replica and the heard heartbeats (GET /state, placement input).
import { runnerKey } from "@ic/protocol";
import { replicaSets } from "@ic/state";
import type { StateDocument } from "@ic/protocol";
import type { ClusterView } from "@ic/protocol";
import { outstandingByInstance } from "./request-load.ts";
import type { RequestLoad } from "./request-load.ts";

export function stateDocument(
  cluster: ClusterView,
  name: string,
  now: number,
  opts: { readonly links?: boolean; readonly load?: RequestLoad } = {},
): StateDocument {
  const s = cluster.snapshot();
  const session = s.session;
  const live = new Map(cluster.livePeers().map((p) => [p.heartbeat.peer_key, p]));
  const members = Object.values(s.members).sort(
    (a, b) => a.started_at - b.started_at || a.node_id.localeCompare(b.node_id),
  );
  const idOf = new Map(members.map((m) => [m.peer_key, m.node_id]));
  const outstanding = outstandingByInstance(
    opts.load?.local() ?? new Map(),
    [...live.values()].map((p) => p.heartbeat),
    cluster.peerKey,
  );
  const links: StateDocument["topology"]["links"] = [];
  for (const m of opts.links === false ? [] : members) {
    for (const l of live.get(m.peer_key)?.heartbeat.links ?? []) {
      const to = idOf.get(l.peer_key);
      if (to) links.push({ from: m.node_id, to, rtt_ms: l.rtt_ms });
    }
  }
  return {
    session,
    index: s.index,
    intent_restored: s.intent_restored,
    this_node: {
      node_id: cluster.nodeId,
      name,
      is_master: cluster.isMaster,
      synced: cluster.synced,
      tasks_open: opts.load?.tasksOpen ?? 0,
    },
    node_identities: members.map((m) => ({
      node_id: m.node_id,
      name: m.name,
      api_url: m.api_url,
      host: m.host,
      is_master: session?.master_peer_key === m.peer_key,
      started_at: m.started_at,
      joined_at: m.joined_at,
    })),
    nodeHealth: members.flatMap((m) =>
      (live.get(m.peer_key)?.heartbeat.health ?? []).map((h) => ({
        ...h,
        node_id: m.node_id,
        node_name: m.name,
      })),
    ),
    topology: {
      nodes: members.map((m) => {
        const p = live.get(m.peer_key);
        return {
          node_id: m.node_id,
          name: m.name,
          last_heard_ms_ago: p ? Math.max(0, now - p.lastHeard) : Number.MAX_SAFE_INTEGER,
          telemetry: p?.heartbeat.telemetry ?? null,
          loop_delay: p?.heartbeat.loop_delay ?? null,
        };
      }),
      links,
    },
    models: Object.values(s.models),
    instances: Object.values(s.instances).map((i) => ({
      ...i,
      runners: i.assignments.flatMap((a) => {
        const r = s.runners[runnerKey(i.instance_id, a.rank)];
        return r ? [r] : [];
      }),
      outstanding: outstanding.get(i.instance_id) ?? 0,
    })),
    deployments: Object.values(s.deployments),
    replica_sets: replicaSetsOf(s, outstanding),

    pulls: [...live.values()].flatMap((p) => p.heartbeat.pulls ?? []),
  };
}

/** The state's replica sets as GET /state shows them (grouped as the scale rule groups them). */
function replicaSetsOf(
  s: ReturnType<ClusterView["snapshot"]>,
  outstanding: ReadonlyMap<string, number>,
): StateDocument["replica_sets"] {
  return replicaSets(s, (id) => outstanding.get(id) ?? 0).map((r) => ({
    replica_set: r.replica_set,
    model_id: r.deployments[0]!.model_id,
    ...(r.scale ? { scale: r.scale } : {}),
    target: r.deployments.length - (r.retiring ? 1 : 0),
    ready: r.ready,
    retiring: r.retiring ? 1 : 0,
    outstanding: r.inFlight,
  }));
}
