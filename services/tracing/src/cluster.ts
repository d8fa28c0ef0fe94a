// The cluster-wide view of traces: asks every live peer's API over HTTP (with this node's token and
// a per-peer timeout), merges the answers deduplicated by task id, and names the peers that did not
// answer instead of failing. Peer answers are validated at this edge.
import { z } from "zod";
import { askPeer } from "@ic/protocol";
import type { PeerAnswer, PeerApi, PeerAskOptions, UnreachablePeer } from "@ic/protocol";
import { TraceStatsSchema } from "./trace.ts";
import type { TraceEntry } from "./files.ts";
import type { TraceStats } from "./trace.ts";

export type TracePeer = PeerApi;

export interface FanOutOptions extends PeerAskOptions {
  /** Live peers, this node excluded. */
  readonly peers: () => readonly TracePeer[];
}

export type Unreachable = UnreachablePeer;

export interface ClusterTraceEntry extends TraceEntry {
  /** The node whose answer listed it first (this node first, then peers in their order). */
  readonly node: string;
}

export interface ClusterTraceList {
  readonly traces: ClusterTraceEntry[];
  /** Nodes whose traces are included (this node and every peer that answered). */
  readonly nodes: string[];
  readonly unreachable: Unreachable[];
}

export const TraceEntrySchema = z.object({
  taskId: z.string(),
  createdAt: z.string(),
  modelId: z.string(),
});
const TraceListSchema = z.object({ traces: z.array(TraceEntrySchema) });

/** This node's traces plus every live peer's, newest first, one entry per task id. */
export async function clusterTraces(
  self: { name: string; list: () => Promise<TraceEntry[]> },
  limit: number,
  o: FanOutOptions,
): Promise<ClusterTraceList> {
  const peers = o.peers();
  const [local, ...answers] = await Promise.all([
    self.list(),
    ...peers.map((p) => askPeer(p, `/v1/traces?limit=${limit}`, TraceListSchema, o)),
  ]);
  const seen = new Map<string, ClusterTraceEntry>();
  const add = (node: string, list: readonly TraceEntry[]) => {
    for (const t of list) if (!seen.has(t.taskId)) seen.set(t.taskId, { ...t, node });
  };
  add(self.name, local!);
  const nodes = [self.name];
  const unreachable: Unreachable[] = [];
  peers.forEach((p, i) => {
    const a = answers[i] as PeerAnswer<z.infer<typeof TraceListSchema>>;
    if (a.kind === "ok") {
      add(p.name, a.body.traces);
      nodes.push(p.name);
    } else unreachable.push({ node: p.name, error: a.kind === "failed" ? a.error : "HTTP 404" });
  });
  const traces = [...seen.values()]
    .sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0))
    .slice(0, limit);
  return { traces, nodes, unreachable };
}

export type ClusterTraceStats =
  | { found: true; stats: TraceStats; foundOn: string; unreachable: Unreachable[] }
  | { found: false; unreachable: Unreachable[] };

/** The stats of `taskId` from this node if it has the trace, else from the first peer that has it. */
export async function clusterTraceStats(
  self: { name: string; stats: (taskId: string) => Promise<TraceStats | undefined> },
  taskId: string,
  o: FanOutOptions,
): Promise<ClusterTraceStats> {
  const local = await self.stats(taskId);
  if (local) return { found: true, stats: local, foundOn: self.name, unreachable: [] };
  const peers = o.peers();
  const answers = await Promise.all(
    peers.map((p) =>
      askPeer(p, `/v1/traces/${encodeURIComponent(taskId)}/stats`, TraceStatsSchema, o),
    ),
  );
  const unreachable: Unreachable[] = [];
  let hit: { stats: TraceStats; foundOn: string } | undefined;
  peers.forEach((p, i) => {
    const a = answers[i]!;
    if (a.kind === "ok") hit ??= { stats: a.body, foundOn: p.name };
    else if (a.kind === "failed") unreachable.push({ node: p.name, error: a.error });
  });
  return hit ? { found: true, ...hit, unreachable } : { found: false, unreachable };
}
