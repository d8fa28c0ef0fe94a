// Placement: chooses a connected cycle of `min_nodes` nodes that can each hold their share, or returns
// a typed refusal naming the node and the GB arithmetic. Pure; bounded search, no cycle enumeration.
import { DEFAULT_MEMORY_MODEL, gb, requirementFor, splitLayers } from "./memory.ts";
import type { MemoryModel, ModelFacts } from "./memory.ts";

export type Sharding = "Pipeline" | "Tensor";

export interface CandidateNode {
  readonly node_id: string;
  readonly name: string;
  /** null while the node's memory has not been gossiped yet. */
  readonly free_bytes: number | null;
}

export interface LinkEdge {
  readonly a: string;
  readonly b: string;
  readonly rtt_ms: number;
}

export interface PlacementInput {
  readonly nodes: readonly CandidateNode[];
  readonly links: readonly LinkEdge[];
  /** True while some node's link measurements have not arrived. */
  readonly linksPending?: boolean;
  readonly model: ModelFacts;
  readonly minNodes: number;
  readonly sharding: Sharding;
  readonly excluded?: readonly string[];
  readonly memory?: Partial<MemoryModel>;
  /** Cap on search steps; keeps the answer fast on large clusters. */
  readonly searchBudget?: number;
}

export const REFUSAL_CODES = [
  "insufficient_memory",
  "no_cycle",
  "all_excluded",
  "tensor_unsupported",
  "info_pending",
  "invalid_request",
] as const;
export type RefusalCode = (typeof REFUSAL_CODES)[number];

export function httpStatusOf(code: RefusalCode): 400 | 503 {
  switch (code) {
    case "insufficient_memory":
    case "no_cycle":
    case "all_excluded":
    case "tensor_unsupported":
    case "invalid_request":
      return 400;
    case "info_pending":
      return 503;
  }
}

export interface NodeShare {
  readonly node_id: string;
  readonly name: string;
  readonly rank: number;
  readonly layers?: number;
  readonly fraction: number;
  readonly weight_bytes: number;
  readonly kv_bytes: number;
  readonly required_bytes: number;
  readonly free_bytes: number;
}

export type PlacementResult =
  | { readonly ok: true; readonly sharding: Sharding; readonly shares: readonly NodeShare[] }
  | {
      readonly ok: false;
      readonly code: RefusalCode;
      readonly message: string;
      readonly node_id?: string;
    };

const refuse = (code: RefusalCode, message: string, node_id?: string): PlacementResult => ({
  ok: false,
  code,
  message,
  ...(node_id ? { node_id } : {}),
});

/** Shares for an ordered set of nodes, or the first node (by rank) that cannot fit. */
export function sharesFor(
  nodes: readonly (CandidateNode & { free_bytes: number })[],
  model: ModelFacts,
  sharding: Sharding,
  mem: MemoryModel,
):
  { ok: true; shares: NodeShare[] } | { ok: false; share: NodeShare; reason: "memory" | "layers" } {
  let fractions: number[];
  let layers: number[] | null = null;
  if (sharding === "Tensor") {
    fractions = nodes.map(() => 1 / nodes.length);
  } else {
    layers = splitLayers(
      model.layers,
      nodes.map((n) => n.free_bytes),
    );
    if (!layers) {
      const n0 = nodes[0]!;
      return {
        ok: false,
        reason: "layers",
        share: {
          node_id: n0.node_id,
          name: n0.name,
          rank: 0,
          fraction: 0,
          weight_bytes: 0,
          kv_bytes: 0,
          required_bytes: 0,
          free_bytes: n0.free_bytes,
        },
      };
    }
    fractions = layers.map((l) => l / model.layers);
  }
  const shares: NodeShare[] = nodes.map((n, rank) => {
    const r = requirementFor(model, fractions[rank]!, mem);
    return {
      node_id: n.node_id,
      name: n.name,
      rank,
      ...(layers ? { layers: layers[rank]! } : {}),
      fraction: fractions[rank]!,
      weight_bytes: r.weight_bytes,
      kv_bytes: r.kv_bytes,
      required_bytes: r.required_bytes,
      free_bytes: n.free_bytes,
    };
  });
  // Equal to free is rejected: a node must have strictly more free memory than its share needs.
  const bad = shares.find((s) => s.required_bytes >= s.free_bytes);
  return bad ? { ok: false, share: bad, reason: "memory" } : { ok: true, shares };
}

export function memoryMessage(s: NodeShare, mem: MemoryModel, sharding: Sharding): string {
  const what =
    sharding === "Pipeline"
      ? `${s.layers ?? "?"} layer(s)`
      : `1/${Math.round(1 / s.fraction)} of every tensor`;
  return (
    `node ${s.name} (${s.node_id}) cannot fit its share (${what}): needs ${gb(s.required_bytes)} GB ` +
    `(${gb(s.weight_bytes)} GB weights x ${mem.overheadFactor.toFixed(2)} overhead + ${gb(s.kv_bytes)} GB KV cache + ` +
    `${gb(mem.runnerBytes)} GB runner) but has ${gb(s.free_bytes)} GB free`
  );
}

/**
 * Finds simple cycles of exactly k nodes (k = 1: a node; k = 2: a linked pair), trying the nodes with
 * most free memory first, and returns the first whose shares fit. DFS is bounded by `budget` expansions,
 * so the cost is O(budget + E log E) whatever the cluster size.
 */
export function place(input: PlacementInput): PlacementResult {
  const mem: MemoryModel = { ...DEFAULT_MEMORY_MODEL, ...input.memory };
  const k = input.minNodes;
  const { model, sharding } = input;
  if (!Number.isInteger(k) || k < 1)
    return refuse("invalid_request", "min_nodes must be a positive integer");
  if (sharding === "Tensor") {
    if (!model.supports_tensor) {
      return refuse(
        "tensor_unsupported",
        `model ${model.model_id} (${model.layers} layers) does not support Tensor sharding; use Pipeline`,
      );
    }
    if (k > 1 && model.head_count > 0 && model.head_count % k !== 0) {
      return refuse(
        "tensor_unsupported",
        `model ${model.model_id} has ${model.head_count} attention heads, which cannot be split evenly across ${k} nodes; use Pipeline or a node count dividing ${model.head_count}`,
      );
    }
  }
  if (sharding === "Pipeline" && model.layers < k) {
    return refuse(
      "no_cycle",
      `model ${model.model_id} has ${model.layers} layers, fewer than min_nodes ${k}; Pipeline needs at least one layer per node`,
    );
  }
  const excluded = new Set(input.excluded ?? []);
  const all = input.nodes;
  const candidates = all.filter((n) => !excluded.has(n.node_id));
  if (all.length === 0) return refuse("info_pending", "no cluster members are known yet");
  if (candidates.length === 0) {
    return refuse(
      "all_excluded",
      `exclusions removed every candidate (${all.length} node(s) excluded)`,
    );
  }
  if (candidates.length < k) {
    if (all.length >= k) {
      return refuse(
        "all_excluded",
        `exclusions left ${candidates.length} of ${all.length} node(s); min_nodes is ${k}`,
      );
    }
    return refuse(
      "no_cycle",
      `the cluster has ${all.length} node(s); no cycle of min_nodes ${k} exists`,
    );
  }
  const pending = candidates.filter((n) => n.free_bytes === null);
  if (pending.length > 0) {
    return refuse(
      "info_pending",
      `memory of ${pending.map((n) => n.name).join(", ")} not yet known; retry in a few seconds`,
    );
  }
  if (k > 1 && input.linksPending)
    return refuse(
      "info_pending",
      "link measurements between nodes not yet gossiped; retry in a few seconds",
    );
  const known = candidates as (CandidateNode & { free_bytes: number })[];
  const ranked = [...known].sort(
    (a, b) => b.free_bytes - a.free_bytes || a.node_id.localeCompare(b.node_id),
  );

  if (k === 1) {
    let best: NodeShare | undefined;
    for (const n of ranked) {
      const r = sharesFor([n], model, sharding, mem);
      if (r.ok) return { ok: true, sharding, shares: r.shares };
      best ??= r.share;
    }
    return refuse("insufficient_memory", memoryMessage(best!, mem, sharding), best!.node_id);
  }

  // Adjacency among candidates, neighbors ordered by free memory then latency.
  const byId = new Map(ranked.map((n) => [n.node_id, n]));
  const adj = new Map<string, { id: string; rtt: number }[]>();
  for (const l of input.links) {
    if (l.a === l.b || !byId.has(l.a) || !byId.has(l.b)) continue;
    for (const [x, y] of [
      [l.a, l.b],
      [l.b, l.a],
    ] as const) {
      const list = adj.get(x) ?? [];
      if (!list.some((e) => e.id === y)) list.push({ id: y, rtt: l.rtt_ms });
      adj.set(x, list);
    }
  }
  for (const list of adj.values()) {
    list.sort(
      (p, q) =>
        byId.get(q.id)!.free_bytes - byId.get(p.id)!.free_bytes ||
        p.rtt - q.rtt ||
        p.id.localeCompare(q.id),
    );
  }
  const linked = (x: string, y: string) => adj.get(x)?.some((e) => e.id === y) ?? false;

  let budget = input.searchBudget ?? 4_000;
  let firstMisfit: NodeShare | undefined;
  const path: string[] = [];
  const onPath = new Set<string>();

  const tryCycle = (): PlacementResult | null => {
    const nodes = path.map((id) => byId.get(id)!);
    const r = sharesFor(nodes, model, sharding, mem);
    if (r.ok) return { ok: true, sharding, shares: r.shares };
    firstMisfit ??= r.share;
    return null;
  };

  const dfs = (start: string): PlacementResult | null => {
    if (budget-- <= 0) return null;
    const last = path[path.length - 1]!;
    if (path.length === k) return k === 2 || linked(last, start) ? tryCycle() : null;
    for (const e of adj.get(last) ?? []) {
      if (onPath.has(e.id)) continue;
      // Prune: a node that is not the start's neighbour can only close the cycle later, never last.
      if (path.length === k - 1 && k > 2 && !linked(e.id, start)) continue;
      path.push(e.id);
      onPath.add(e.id);
      const r = dfs(start);
      path.pop();
      onPath.delete(e.id);
      if (r) return r;
      if (budget <= 0) return null;
    }
    return null;
  };

  for (const start of ranked) {
    if (budget <= 0) break;
    path.push(start.node_id);
    onPath.add(start.node_id);
    const r = dfs(start.node_id);
    path.pop();
    onPath.delete(start.node_id);
    if (r) return r;
  }
  if (firstMisfit)
    return refuse(
      "insufficient_memory",
      memoryMessage(firstMisfit, mem, sharding),
      firstMisfit.node_id,
    );
  return refuse(
    "no_cycle",
    `no connected cycle of ${k} nodes exists among ${candidates.length} candidate(s) in the measured link graph`,
  );
}

export interface PreviewEntry {
  readonly sharding: Sharding;
  readonly nodes: number;
  readonly result: PlacementResult;
}

/** Every combination (sharding x node count) with its placement or typed reason. */
export function previews(input: Omit<PlacementInput, "minNodes" | "sharding">): PreviewEntry[] {
  const out: PreviewEntry[] = [];
  const max = Math.max(1, input.nodes.length);
  for (const sharding of ["Pipeline", "Tensor"] as const) {
    for (let k = 1; k <= max; k++)
      out.push({ sharding, nodes: k, result: place({ ...input, minNodes: k, sharding }) });
  }
  return out;
}
