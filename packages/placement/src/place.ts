// Placement: picks a connected cycle of min_nodes nodes whose every member holds its share with room to
// spare, or returns a typed refusal naming the node and the GB arithmetic. Pure; bounded search.
import { estimateNodeRequirement, fits, gb, gpuLayerFit, splitLayers } from "./memory.ts";
import type { GpuFit, MemoryModel, ModelFacts } from "./memory.ts";
import { gpuMemoryMessage, memoryMessage, refusal } from "./refusals.ts";
import type { Refusal } from "./refusals.ts";
import { prepare } from "./prepared.ts";
import type { Prepared } from "./prepared.ts";
import { cycleRtt, improveRing, searchCycles } from "./topology.ts";
import type {
  Budget,
  CycleSearchOptions,
  CycleSearchOutcome,
  LinkEdge,
  LinkGraph,
} from "./topology.ts";

export const SHARDINGS = ["Pipeline", "Tensor"] as const;
export type Sharding = (typeof SHARDINGS)[number];
export { DEFAULT_SEARCH_BUDGET } from "./prepared.ts";

export interface CandidateNode {
  readonly node_id: string;
  /** Display name, used in messages. */
  readonly name: string;
  /** Free memory the runner may use; null while the node's memory has not been gossiped yet. */
  readonly free_bytes: number | null;
  /**
   * Where the node serves on several GPUs: the free memory of each (their sum is `free_bytes`).
   * A layer share must fit them whole layer by whole layer (gpuLayerFit).
   */
  readonly gpus_free_bytes?: readonly number[];
}

export interface PlacementInput {
  /** Every live member of the cluster (excluded ones included; exclusions are applied here). */
  readonly nodes: readonly CandidateNode[];
  /** Measured undirected links; unknown ids and self links are ignored, duplicates keep the fastest. */
  readonly links: readonly LinkEdge[];
  /** True while some node's link measurements have not arrived (multi-node placements wait). */
  readonly linksPending?: boolean;
  readonly model: ModelFacts;
  readonly minNodes: number;
  readonly sharding: Sharding;
  /** Node ids to leave out; unknown or stale ids are ignored. */
  readonly excluded?: readonly string[];
  /** Overrides of DEFAULT_MEMORY_MODEL. */
  readonly memory?: Partial<MemoryModel>;
  /** Steps (adjacency entries looked at) the cycle search may spend. Default DEFAULT_SEARCH_BUDGET. */
  readonly searchBudget?: number;
}

/** Once a fitting cycle is found, the search keeps looking this many steps for a better one. */
const IMPROVE_STEPS = 2_000;
/** ...and stops after this many fitting cycles (or, when none fits, this many rings for the message). */
const MAX_FITS = 8;
/** Rings up to this size get a latency 2-opt pass. */
const TWO_OPT_MAX = 32;

export interface NodeShare {
  readonly node_id: string;
  readonly name: string;
  /** Position in the ring; rank 0 runs the server, the others serve it their share. */
  readonly rank: number;
  /** Pipeline: layers held by this rank. */
  readonly layers?: number;
  /** Share of the weights and KV cache (Tensor: 1/k; Pipeline: layers / total layers). */
  readonly fraction: number;
  readonly weight_bytes: number;
  readonly kv_bytes: number;
  /** weight_bytes x overhead factor + kv_bytes + runner allowance. */
  readonly required_bytes: number;
  readonly free_bytes: number;
}

export interface Placement {
  readonly ok: true;
  readonly sharding: Sharding;
  /** The ring in order, rank 0 first; consecutive ranks (and the last and first) are linked. */
  readonly shares: readonly NodeShare[];
  /** Summed latency of the ring's links (0 for one node, the link's for two). */
  readonly cycle_rtt_ms: number;
  /** Smallest (free - required) / free over the ring. */
  readonly min_headroom: number;
}

export type PlacementResult = Placement | Refusal;

export interface PreviewEntry {
  readonly sharding: Sharding;
  readonly nodes: number;
  readonly result: PlacementResult;
}

export type PreviewInput = Omit<PlacementInput, "minNodes" | "sharding">;

/** A ring scored against the memory model with plain arithmetic; shares are built only for answers. */
interface Evaluated {
  readonly ring: readonly number[];
  readonly sharding: Sharding;
  /** Pipeline: layers per ring position. */
  readonly layers: readonly number[] | null;
  readonly fits: boolean;
  /** Smallest (free - required) / free over the ring. */
  readonly minHeadroom: number;
  /** Ring position of the node with the least headroom. */
  readonly worst: number;
  /** Set when that node's tightest spot is one of its GPUs (a layer share over several GPUs). */
  readonly worstGpu: GpuFit | null;
  readonly rtt: number;
}

/** Layers per ring position: split in rank order, so a node set's split does not depend on direction. */
function ringLayers(p: Prepared, ring: readonly number[]): number[] {
  const L = p.model.layers;
  if (ring.length === 1) return [L];
  const byRank = Int32Array.from(ring).sort();
  // The caller guarantees layers >= k, so the split exists.
  const split = splitLayers(
    L,
    Array.from(byRank, (r) => p.ranked[r]!.free_bytes),
  )!;
  return ring.map((r) => {
    let lo = 0;
    let hi = byRank.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (byRank[mid]! < r) lo = mid + 1;
      else hi = mid;
    }
    return split[lo]!;
  });
}

function evaluate(
  p: Prepared,
  g: LinkGraph,
  ring: readonly number[],
  sharding: Sharding,
): Evaluated {
  const k = ring.length;
  const layers = sharding === "Pipeline" ? ringLayers(p, ring) : null;
  const { overheadFactor, runnerBytes } = p.mem;
  let ok = true;
  let minHeadroom = Infinity;
  let worst = 0;
  let worstGpu: GpuFit | null = null;
  for (let i = 0; i < k; i++) {
    const fraction = layers ? layers[i]! / p.model.layers : 1 / k;
    // The same arithmetic, in the same order, as estimateNodeRequirement.
    const required =
      p.model.weight_bytes * fraction * overheadFactor + p.kvBytes * fraction + runnerBytes;
    const node = p.ranked[ring[i]!]!;
    const free = node.free_bytes;
    if (!fits(required, free)) ok = false;
    let h = (free - required) / Math.max(free, 1);
    // A layer share over several GPUs: whole layers per GPU (a row split divides evenly).
    const gpu = layers ? gpuLayerFit(p.model, layers[i]!, node.gpus_free_bytes, p.mem) : null;
    if (gpu && !gpu.fits) ok = false;
    const tighter = gpu !== null && gpu.headroom < h;
    if (tighter) h = gpu.headroom;
    if (h < minHeadroom) {
      minHeadroom = h;
      worst = i;
      worstGpu = tighter ? gpu : null;
    }
  }
  return {
    ring,
    sharding,
    layers,
    fits: ok,
    minHeadroom,
    worst,
    worstGpu,
    rtt: cycleRtt(g, ring),
  };
}

/** The per-node shares of an evaluated ring, in ring order (arithmetic of estimateNodeRequirement). */
function sharesOf(p: Prepared, e: Evaluated): NodeShare[] {
  const { overheadFactor, runnerBytes } = p.mem;
  const out: NodeShare[] = [];
  for (let rank = 0; rank < e.ring.length; rank++) {
    const n = p.ranked[e.ring[rank]!]!;
    const layers = e.layers?.[rank];
    const fraction = layers !== undefined ? layers / p.model.layers : 1 / e.ring.length;
    const weight = p.model.weight_bytes * fraction;
    const kv = p.kvBytes * fraction;
    const required = weight * overheadFactor + kv + runnerBytes;
    out.push(
      layers !== undefined
        ? {
            node_id: n.node_id,
            name: n.name,
            rank,
            layers,
            fraction,
            weight_bytes: weight,
            kv_bytes: kv,
            required_bytes: required,
            free_bytes: n.free_bytes,
          }
        : {
            node_id: n.node_id,
            name: n.name,
            rank,
            fraction,
            weight_bytes: weight,
            kv_bytes: kv,
            required_bytes: required,
            free_bytes: n.free_bytes,
          },
    );
  }
  return out;
}

/** Most headroom (in whole percent) first, then lowest ring latency, then node ids in ring order. */
function better(p: Prepared, a: Evaluated, b: Evaluated): boolean {
  const ha = Math.floor(a.minHeadroom * 100);
  const hb = Math.floor(b.minHeadroom * 100);
  if (ha !== hb) return ha > hb;
  if (a.rtt !== b.rtt) return a.rtt < b.rtt;
  for (let i = 0; i < a.ring.length && i < b.ring.length; i++) {
    const x = p.ranked[a.ring[i]!]!.node_id;
    const y = p.ranked[b.ring[i]!]!.node_id;
    if (x !== y) return x < y;
  }
  return false;
}

/** Rank 0 is the ring's best-ranked node; the ring runs towards its better-ranked neighbour. */
function orient(ring: readonly number[]): number[] {
  const r = [...ring];
  const s = r.indexOf(Math.min(...r));
  const rot = [...r.slice(s), ...r.slice(0, s)];
  if (rot.length >= 3 && rot[rot.length - 1]! < rot[1]!)
    return [rot[0]!, ...rot.slice(1).reverse()];
  return rot;
}

function accept(p: Prepared, e: Evaluated): Placement {
  return {
    ok: true,
    sharding: e.sharding,
    shares: sharesOf(p, e),
    cycle_rtt_ms: e.rtt,
    min_headroom: e.minHeadroom,
  };
}

function memoryRefusal(p: Prepared, e: Evaluated, suffix = ""): Refusal {
  const s = sharesOf(p, e)[e.worst]!;
  const message =
    e.worstGpu && !e.worstGpu.fits
      ? gpuMemoryMessage(s, e.worstGpu, p.model.layers, e.ring.length)
      : memoryMessage(s, p.mem, p.model.layers, e.ring.length);
  return refusal("insufficient_memory", message + suffix, s.node_id);
}

/** The checks that need no search: request shape, model support, membership, pending info. */
function precheck(p: Prepared, k: number, sharding: Sharding): Refusal | null {
  const m = p.model;
  if (!Number.isInteger(k) || k < 1)
    return refusal("invalid_request", `min_nodes must be a positive integer (got ${k})`);
  if (p.memError) return refusal("invalid_request", p.memError);
  if (p.modelError) return refusal("invalid_request", p.modelError);
  if (sharding === "Tensor") {
    if (!m.supports_tensor) {
      return refusal(
        "tensor_unsupported",
        `model ${m.model_id} does not support Tensor sharding (its architecture cannot be split by rows); use Pipeline`,
      );
    }
    if (k > 1 && m.head_count > 0 && m.head_count % k !== 0) {
      return refusal(
        "tensor_unsupported",
        `model ${m.model_id} has ${m.head_count} attention heads, which cannot be split evenly across ${k} nodes; use Pipeline or a node count dividing ${m.head_count}`,
      );
    }
  } else if (m.layers < k) {
    return refusal(
      "invalid_request",
      `model ${m.model_id} has ${m.layers} layers, fewer than min_nodes ${k}; Pipeline needs at least one layer per node`,
    );
  }
  if (p.total === 0)
    return refusal("info_pending", "no cluster members are known yet; retry in a few seconds");
  if (p.candidates === 0) {
    return refusal(
      "all_excluded",
      `exclusions removed every candidate: all ${p.total} node(s) are excluded`,
    );
  }
  if (p.candidates < k) {
    return p.total >= k
      ? refusal(
          "all_excluded",
          `exclusions left ${p.candidates} of ${p.total} node(s); min_nodes is ${k}`,
        )
      : refusal(
          "no_cycle",
          `the cluster has ${p.total} node(s); a cycle of min_nodes ${k} needs ${k} connected nodes`,
        );
  }
  if (p.pending.length > 0) {
    const names = [...p.pending].sort();
    const shown =
      names.slice(0, 5).join(", ") + (names.length > 5 ? ` and ${names.length - 5} more` : "");
    return refusal(
      "info_pending",
      `memory of ${shown} not yet known (telemetry not gossiped); retry in a few seconds`,
    );
  }
  if (k > 1 && p.linksPending) {
    return refusal(
      "info_pending",
      "link measurements between nodes not yet gossiped; retry in a few seconds",
    );
  }
  return null;
}

/**
 * Rings of k nodes among ranks < limit: a ring of k >= 3 lies inside one biconnected block, so only
 * blocks of at least k nodes are searched, best-ranked first, sharing one budget.
 */
function rings(
  p: Prepared,
  k: number,
  limit: number,
  o: Omit<CycleSearchOptions, "k" | "limit" | "within">,
): CycleSearchOutcome {
  const g = k === 1 ? p.nodesOnly() : p.graph();
  if (k < 3) return searchCycles(g, { ...o, k, limit });
  let found = 0;
  let exhausted = false;
  const mask = new Uint8Array(limit);
  for (const block of p.blocks(limit)) {
    if (block.length < k) continue;
    if (o.budget.left <= 0) return { found, exhausted: true, stopped: false };
    mask.fill(0);
    for (const v of block) mask[v] = 1;
    const r = searchCycles(g, { ...o, k, limit, within: mask });
    found += r.found;
    exhausted ||= r.exhausted;
    if (r.stopped) return { found, exhausted, stopped: true };
  }
  return { found, exhausted, stopped: false };
}

function largest(p: Prepared, limit: number): number {
  return p.blocks(limit).reduce((m, b) => Math.max(m, b.length), 0);
}

/**
 * Memory proofs: how many of the ranked nodes can hold the smallest possible share, the total that
 * k nodes must hold (the shares' requirements always sum to it), and whether k nodes cannot.
 */
function memoryBounds(p: Prepared, k: number, sharding: Sharding) {
  const n = p.ranked.length;
  const smallest = sharding === "Tensor" ? 1 / k : 1 / p.model.layers;
  const floor = estimateNodeRequirement(p.model, smallest, p.mem).required_bytes;
  let eligible = 0;
  while (eligible < n && fits(floor, p.ranked[eligible]!.free_bytes)) eligible++;
  const need = p.model.weight_bytes * p.mem.overheadFactor + p.kvBytes + k * p.mem.runnerBytes;
  const shortInTotal = k > 1 && p.prefix[k]! <= need;
  const hopeless = eligible < k || p.prefix[k]! <= need;
  const totalNote = shortInTotal
    ? `; the ${k} nodes with most free memory have ${gb(p.prefix[k]!)} GB free in total but ${k} shares need ${gb(need)} GB`
    : "";
  return { eligible, need, hopeless, totalNote };
}

/**
 * Accepts the best fitting ring, improved by 2-opt for rings of 4 to TWO_OPT_MAX nodes when that
 * helps (the improved ring evaluated in the fitting ring's sharding).
 */
function acceptImproved(
  p: Prepared,
  g: Parameters<typeof evaluate>[1],
  fit: Evaluated,
  k: number,
): PlacementResult {
  if (k < 4 || k > TWO_OPT_MAX) return accept(p, fit);
  const tuned = evaluate(p, g, orient(improveRing(g, fit.ring)), fit.sharding);
  return accept(p, tuned.fits && !better(p, fit, tuned) ? tuned : fit);
}

/** No 2-connected block of the link graph holds k nodes: no ring of k can exist. */
function noRingRefusal(p: Prepared, k: number, n: number): PlacementResult {
  return refusal(
    "no_cycle",
    k === 2
      ? `no two of the ${n} candidate node(s) are linked in the measured link graph; 2 nodes need a direct link`
      : `no connected cycle of ${k} nodes exists in the measured link graph: the largest group of candidates joined by two independent paths has ${largest(p, n)} node(s) (of ${n})`,
  );
}

function solve(p: Prepared, k: number, sharding: Sharding): PlacementResult {
  const early = precheck(p, k, sharding);
  if (early) return early;
  const n = p.ranked.length;
  const g = k === 1 ? p.nodesOnly() : p.graph();

  // Topology proof: a ring of k >= 2 nodes lies inside one 2-connected block (a link, for k = 2).
  if (k > 1 && largest(p, n) < k) return noRingRefusal(p, k, n);

  const { eligible, need, hopeless, totalNote } = memoryBounds(p, k, sharding);
  const topK = Array.from({ length: k }, (_, i) => i);

  let bestFit: Evaluated | null = null;
  let bestMiss: Evaluated | null = null;
  let exhausted = false;
  const pipelineCut =
    sharding === "Pipeline" && k > 1
      ? (sum: number, missing: number, s: number) =>
          sum + p.prefix[Math.min(eligible, s + 1 + missing)]! - p.prefix[s + 1]! <= need
      : undefined;

  if (!hopeless) {
    // Search the eligible prefix; Pipeline also cuts paths whose free memory cannot reach `need`.
    let fitsFound = 0;
    const budget: Budget = { left: p.budget };
    const first = rings(p, k, eligible, {
      budget,
      weight: (v) => p.ranked[v]!.free_bytes,
      ...(pipelineCut ? { cut: pipelineCut } : {}),
      visit: (cycle) => {
        const e = evaluate(p, g, orient(cycle), sharding);
        if (e.fits) {
          if (!bestFit || better(p, e, bestFit)) bestFit = e;
          fitsFound++;
          if (fitsFound === 1) budget.left = Math.min(budget.left, IMPROVE_STEPS);
          return fitsFound >= MAX_FITS || k === 1;
        }
        if (!bestMiss || better(p, e, bestMiss)) bestMiss = e;
        return false;
      },
    });
    const fit = bestFit as Evaluated | null;
    if (fit) return acceptImproved(p, g, fit, k);
    const miss = bestMiss as Evaluated | null;
    if (miss) return memoryRefusal(p, miss, totalNote);
    exhausted = first.exhausted;
  }

  // No fitting ring. Look for any ring of k candidates, memory aside: if one exists, memory is what
  // blocks (name the tightest node of the best ring found); if none does, the topology does. The
  // first pass already covered this when every candidate was eligible and nothing was cut.
  if (hopeless || eligible < n || pipelineCut) {
    let late: Evaluated | null = null;
    let seen = 0;
    const second = rings(p, k, n, {
      budget: { left: p.budget },
      visit: (cycle) => {
        const e = evaluate(p, g, orient(cycle), sharding);
        // A ring the budgeted first pass missed may still fit: take it.
        if (e.fits) late = e;
        else if (!bestMiss || better(p, e, bestMiss)) bestMiss = e;
        return e.fits || ++seen >= MAX_FITS;
      },
    });
    const lateFit = late as Evaluated | null;
    if (lateFit) return accept(p, lateFit);
    const miss = bestMiss as Evaluated | null;
    if (miss) return memoryRefusal(p, miss, totalNote);
    // Memory is proven short while the ring search only ran out of budget: report what is proven.
    if (hopeless && second.exhausted)
      return memoryRefusal(p, evaluate(p, g, topK, sharding), totalNote);
    exhausted = second.exhausted;
  }
  return refusal(
    "no_cycle",
    `no connected cycle of ${k} nodes among the ${n} candidate node(s) in the measured link graph` +
      (exhausted ? ` (bounded search: gave up after ${p.budget} steps)` : ""),
  );
}

/**
 * Places a model on a ring of `minNodes` nodes: per node memory (share x overhead + KV + runner,
 * strictly below free), Pipeline layers proportional to free memory or an even Tensor split, the ring
 * connected in the link graph. Prefers the ring with most headroom, then lowest latency, then node ids.
 */
export function place(input: PlacementInput): PlacementResult {
  return solve(prepare(input), input.minNodes, input.sharding);
}

/**
 * Every combination of sharding (Pipeline, Tensor) and node count 1..N (N = nodes in the cluster,
 * at least 1), each with its placement or the typed reason it fails, honouring exclusions.
 */
export function previews(input: PreviewInput): PreviewEntry[] {
  const p = prepare(input);
  const max = Math.max(1, p.total);
  const out: PreviewEntry[] = [];
  for (const sharding of SHARDINGS) {
    for (let k = 1; k <= max; k++) out.push({ sharding, nodes: k, result: solve(p, k, sharding) });
  }
  return out;
}
