// What a placement knows of its input before it searches: the candidates ranked by free memory,
// the nodes still pending, the resolved memory model, the link graph and its biconnected blocks
// (built once, cached per bound). It does not depend on the sharding or min_nodes, so previews of
// every (sharding, min_nodes) share one. The search is place.ts's.
import {
  invalidMemoryModel,
  invalidModelFacts,
  kvCacheBytes,
  resolveMemoryModel,
} from "./memory.ts";
import type { MemoryModel, ModelFacts } from "./memory.ts";
import type { CandidateNode, PreviewInput } from "./place.ts";
import { biconnectedBlocks, buildGraph } from "./topology.ts";
import type { LinkGraph } from "./topology.ts";

/** Bounds one placement to a millisecond or two of search on any cluster (a step is one adjacency entry). */
export const DEFAULT_SEARCH_BUDGET = 100_000;

interface KnownNode {
  readonly node_id: string;
  readonly name: string;
  readonly free_bytes: number;
  readonly gpus_free_bytes?: readonly number[];
}

/** Everything about an input that does not depend on (sharding, min_nodes); previews share it. */
export interface Prepared {
  readonly model: ModelFacts;
  readonly mem: MemoryModel;
  readonly memError: string | null;
  readonly modelError: string | null;
  readonly total: number;
  readonly candidates: number;
  readonly pending: readonly string[];
  readonly linksPending: boolean;
  /** Known candidates by rank: most free memory first, then node id. */
  readonly ranked: readonly KnownNode[];
  /** KV cache of the whole model at the effective context. */
  readonly kvBytes: number;
  /** prefix[i] = free bytes of ranks 0..i-1. */
  readonly prefix: Float64Array;
  readonly budget: number;
  graph(): LinkGraph;
  /** The nodes without their links: all a single-node placement needs. */
  nodesOnly(): LinkGraph;
  /** Biconnected blocks among ranks < limit, best-ranked block first (cached per limit). */
  blocks(limit: number): readonly (readonly number[])[];
}

export function prepare(input: PreviewInput): Prepared {
  const mem = resolveMemoryModel(input.memory);
  const excluded = new Set(input.excluded ?? []);
  const seen = new Set<string>();
  const all: CandidateNode[] = [];
  for (const n of input.nodes) {
    if (seen.has(n.node_id)) continue;
    seen.add(n.node_id);
    all.push(n);
  }
  const candidates = all.filter((n) => !excluded.has(n.node_id));
  const known: KnownNode[] = [];
  const pending: string[] = [];
  for (const n of candidates) {
    const f = n.free_bytes;
    if (f === null || !Number.isFinite(f)) pending.push(n.name);
    else
      known.push({
        node_id: n.node_id,
        name: n.name,
        free_bytes: Math.max(0, f),
        ...(n.gpus_free_bytes ? { gpus_free_bytes: n.gpus_free_bytes } : {}),
      });
  }
  const ranked = known.sort(
    (a, b) =>
      b.free_bytes - a.free_bytes || (a.node_id < b.node_id ? -1 : a.node_id > b.node_id ? 1 : 0),
  );
  const prefix = new Float64Array(ranked.length + 1);
  ranked.forEach((n, i) => (prefix[i + 1] = prefix[i]! + n.free_bytes));
  let graph: LinkGraph | undefined;
  const blockCache = new Map<number, number[][]>();
  const getGraph = () =>
    (graph ??= buildGraph(
      ranked.map((n) => n.node_id),
      input.links,
    ));
  let bare: LinkGraph | undefined;
  return {
    model: input.model,
    mem,
    memError: invalidMemoryModel(mem),
    modelError: invalidModelFacts(input.model),
    total: all.length,
    candidates: candidates.length,
    pending,
    linksPending: input.linksPending ?? false,
    ranked,
    kvBytes: kvCacheBytes(input.model, mem),
    prefix,
    budget: input.searchBudget ?? DEFAULT_SEARCH_BUDGET,
    graph: getGraph,
    nodesOnly: () =>
      graph ??
      (bare ??= buildGraph(
        ranked.map((n) => n.node_id),
        [],
      )),
    blocks(limit) {
      let b = blockCache.get(limit);
      if (b === undefined) {
        b = biconnectedBlocks(getGraph(), limit).sort(
          (x, y) => x[0]! - y[0]! || y.length - x.length,
        );
        blockCache.set(limit, b);
      }
      return b;
    },
  };
}
