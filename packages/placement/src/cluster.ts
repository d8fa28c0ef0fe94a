// Placement against the cluster as it stands: each node's memory is what its heartbeat reports minus
// what instances already placed there reserve, and unhealthy nodes are not candidates. Pure, so the
// gateway (at the API) and the master (in the sequencer, settling races) run the very same check.
import { ServiceError } from "@ic/protocol";
import type {
  Assignment,
  ControlState,
  Heartbeat,
  Instance,
  ModelRecord,
  NodeId,
} from "@ic/protocol";
import {
  contextLadder,
  effectiveContext,
  fits,
  gb,
  gpuLayerFit,
  kvCacheBytes,
  resolveMemoryModel,
} from "./memory.ts";
import type { MemoryModel, ModelFacts } from "./memory.ts";
import { place, previews } from "./place.ts";
import type { CandidateNode, NodeShare, Placement, PreviewEntry, Sharding } from "./place.ts";
import { gpuMemoryMessage, memoryMessage } from "./refusals.ts";
import type { RefusalCode } from "./refusals.ts";
import type { LinkEdge } from "./topology.ts";

/** What placement reads from one live peer's latest heartbeat. */
export type NodeReport = Pick<Heartbeat, "peer_key" | "telemetry" | "health" | "links"> &
  Partial<Pick<Heartbeat, "draining">>;

/** Why a member cannot take instances: the nodeHealth code and its message. */
export interface Unavailable {
  readonly health_code: string;
  readonly message: string;
}

/** One member's memory as placement counts it, with the figures it was derived from. */
export interface NodeCapacity {
  readonly node_id: string;
  readonly peer_key: string;
  readonly name: string;
  /** Reported by the node (RAM, or VRAM where the engine serves on GPU); null until heard. */
  readonly total_bytes: number | null;
  readonly reported_free_bytes: number | null;
  /** Sum of `required_bytes` of every placed instance's share on this node (from the replica). */
  readonly reserved_bytes: number;
  /** What a new share may use: max(0, min(reported free, total - reserved)); null until heard. */
  readonly free_bytes: number | null;
  /**
   * Where the node serves on 2+ GPUs: what a new share may use on each (reported free VRAM, the
   * node's reservations spread over its GPUs by size, scaled to sum to `free_bytes`); else null.
   */
  readonly gpus_free_bytes: readonly number[] | null;
  /** Set when the node is not a candidate (unusable engine, error-level nodeHealth). */
  readonly unavailable: Unavailable | null;
  /**
   * Whether it can take part in a Tensor split across nodes: its engine serves on a GPU and its
   * capability probe found a split mode that runs over rpc devices (`-sm tensor` or `-sm row`),
   * with the engine's own words; unknown: no.
   */
  readonly tensor_across_nodes: { readonly ok: boolean; readonly evidence: string };
}

/** Placement refusal codes plus the one that only a cluster view can give. */
export type ClusterRefusalCode = RefusalCode | "node_unhealthy";

export interface ClusterRefusal {
  readonly ok: false;
  readonly code: ClusterRefusalCode;
  readonly message: string;
  /** The node at fault (insufficient_memory, node_unhealthy). */
  readonly node_id?: string;
  /** node_unhealthy: the nodeHealth code that keeps the node out. */
  readonly health_code?: string;
}

/** A placement and the context its runner starts with (what the memory estimate counted). */
export type ClusterPlacement = Placement & { readonly context_size: number };

export type ClusterPlacementResult = ClusterPlacement | ClusterRefusal;

/** A refusal as the error a client gets: one mapping for the API and the master's re-check. */
export function refusalError(r: ClusterRefusal): ServiceError {
  const details = {
    ...(r.node_id !== undefined ? { node_id: r.node_id } : {}),
    ...(r.health_code !== undefined ? { health_code: r.health_code } : {}),
  };
  return new ServiceError(r.code, r.message, Object.keys(details).length > 0 ? { details } : {});
}

export interface ClusterRequest {
  readonly model: ModelRecord;
  readonly minNodes: number;
  readonly sharding: Sharding;
  readonly excluded?: readonly string[];
  /**
   * Without `contextSize` (none configured), the context is the largest of contextLadder() that
   * fits: the model's trained one when memory allows.
   */
  readonly memory?: Partial<MemoryModel>;
}

/**
 * Memory a new share may use on a node. The reported free figure alone misses instances placed but
 * not loaded yet; subtracting every reservation from it would count a loaded runner twice (on a GPU
 * its VRAM is already gone from the free figure). So reservations come off the total, and the
 * reported free figure still caps the result (other processes, a configured memory limit). On CPU
 * the weights are mmapped and stay in page cache, which the free figure counts as available; the
 * total-minus-reservations term is what holds them.
 */
export function availableBytes(total: number, reportedFree: number, reserved: number): number {
  return Math.max(0, Math.min(reportedFree, total - reserved));
}

/**
 * Why a node cannot take instances, or null: it is draining (it leaves once its requests end), an
 * unusable engine, or an error-level health entry.
 */
export function unavailableReason(
  r: Pick<NodeReport, "telemetry" | "health" | "draining">,
): Unavailable | null {
  if (r.draining)
    return {
      health_code: "draining",
      message: "the node is draining: it leaves the cluster once its requests in flight end",
    };
  const engine = r.telemetry?.engine;
  if (engine && !engine.usable) {
    const entry = r.health.find((h) => h.code === "invalid_engine_binary");
    return {
      health_code: "invalid_engine_binary",
      message:
        entry?.message ??
        `the engine ${engine.server_bin ?? "(not found)"} is unusable: ${engine.problem ?? "unknown problem"}`,
    };
  }
  const err = r.health.find((h) => h.severity === "error" && !CLUSTER_WIDE.has(h.code));
  return err ? { health_code: err.code, message: err.message } : null;
}

/**
 * Health codes a node reports about the cluster rather than about itself: they do not make it a
 * worse home for an instance. The intent store without a quorum refuses the placement's write
 * itself (503 no_quorum), which says what is wrong; calling the master's node unhealthy would not.
 */
const CLUSTER_WIDE: ReadonlySet<string> = new Set(["intent_store_unavailable"]);

/** Every member's capacity: its live report (if any) minus the shares placed on it in `state`. */
export function nodeCapacities(
  state: ControlState,
  reports: readonly NodeReport[],
): NodeCapacity[] {
  const byPeer = new Map(reports.map((r) => [r.peer_key, r]));
  const reserved = new Map<string, number>();
  for (const i of Object.values(state.instances)) {
    for (const a of i.assignments) {
      reserved.set(a.node_id, (reserved.get(a.node_id) ?? 0) + a.required_bytes);
    }
  }
  return Object.values(state.members).map((m) => {
    const r = byPeer.get(m.peer_key);
    const t = r?.telemetry ?? null;
    const res = reserved.get(m.node_id) ?? 0;
    const free = t ? availableBytes(t.memory_total_bytes, t.memory_free_bytes, res) : null;
    return {
      node_id: m.node_id,
      peer_key: m.peer_key,
      name: m.name,
      total_bytes: t ? t.memory_total_bytes : null,
      reported_free_bytes: t ? t.memory_free_bytes : null,
      reserved_bytes: res,
      free_bytes: free,
      gpus_free_bytes: gpusAvailable(t, res, free),
      unavailable: r ? unavailableReason(r) : null,
      tensor_across_nodes: tensorAcrossNodes(t),
    };
  });
}

/** Each GPU's share of what a new instance may use on a node serving on 2+ GPUs (CUDA), else null. */
export function gpusAvailable(
  t: NodeReport["telemetry"],
  reserved: number,
  free: number | null,
): number[] | null {
  if (!t || free === null || t.engine.backend !== "cuda" || t.gpus.length < 2) return null;
  const totals: number[] = [];
  const frees: number[] = [];
  for (const g of t.gpus) {
    if (!g.vram_total_bytes || g.vram_free_bytes === null) return null;
    totals.push(g.vram_total_bytes);
    frees.push(g.vram_free_bytes);
  }
  const all = totals.reduce((a, b) => a + b, 0);
  const each = frees.map((f, i) =>
    Math.max(0, Math.min(f, totals[i]! - (reserved * totals[i]!) / all)),
  );
  const sum = each.reduce((a, b) => a + b, 0);
  // A memory limit (or rounding) can leave the node less than its GPUs: never count more.
  return sum > free && sum > 0 ? each.map((e) => (e * free) / sum) : each;
}

function tensorAcrossNodes(t: NodeReport["telemetry"]): NodeCapacity["tensor_across_nodes"] {
  if (!t) return { ok: false, evidence: "its telemetry is not known yet" };
  const split = t.engine.split;
  if (!split) return { ok: false, evidence: "its engine was not probed" };
  if (!split.row_over_rpc && !(split.tensor_over_rpc && split.tensor_opt_in)) {
    const optIn =
      split.tensor_over_rpc && !split.tensor_opt_in
        ? "; its experimental -sm tensor mode served the probe, but it is off unless every node sets engine.experimental_tensor_split (it did not serve a 30 MB F16 model across two ranks on an H200)"
        : "";
    return { ok: false, evidence: `${split.evidence}${optIn}` };
  }
  // llama.cpp offloads a tensor share only to GPUs and rpc devices: a node whose llama-server runs
  // on the CPU would hold none of its own share.
  if (t.engine.backend !== "cuda" && t.engine.backend !== "metal")
    return {
      ok: false,
      evidence: `it serves on the CPU (${t.engine.backend} engine), and llama.cpp splits tensors only across GPUs and rpc devices`,
    };
  return { ok: true, evidence: split.evidence };
}

/**
 * Tensor sharding across nodes needs an engine that splits tensors over its rpc devices, on every
 * node the instance could use (the capability probe says; llama.cpp of this build cannot with
 * `-sm row`). Null when every candidate can; else the typed refusal naming the first that cannot.
 */
function tensorAcrossNodesRefusal(
  caps: readonly NodeCapacity[],
  excluded: ReadonlySet<string>,
  minNodes: number,
): ClusterRefusal | null {
  const lacking = caps.find((c) => !excluded.has(c.node_id) && !c.tensor_across_nodes.ok);
  if (!lacking) return null;
  return {
    ok: false,
    code: "tensor_unsupported",
    message:
      `Tensor sharding across ${minNodes} nodes needs an engine that splits tensors over its rpc ` +
      `devices, and the engine of node ${lacking.name} (${lacking.node_id}) does not ` +
      `(${lacking.tensor_across_nodes.evidence}); use Pipeline sharding for min_nodes > 1, or ` +
      `Tensor with min_nodes 1 on a node with several GPUs`,
    node_id: lacking.node_id,
  };
}

/** Undirected links between members, from their reports; pending while a member has measured none. */
export function clusterLinks(
  state: ControlState,
  reports: readonly NodeReport[],
): { links: LinkEdge[]; linksPending: boolean } {
  const members = Object.values(state.members);
  const idOf = new Map(members.map((m) => [m.peer_key, m.node_id]));
  const byPeer = new Map(reports.map((r) => [r.peer_key, r]));
  const seen = new Set<string>();
  const links: LinkEdge[] = [];
  let linksPending = false;
  for (const m of members) {
    const r = byPeer.get(m.peer_key);
    if (!r) continue;
    if (members.length > 1 && r.links.length === 0) linksPending = true;
    for (const l of r.links) {
      const other = idOf.get(l.peer_key);
      if (!other) continue;
      const key = [m.node_id, other].sort().join("|");
      if (seen.has(key)) continue;
      seen.add(key);
      links.push({ a: m.node_id, b: other, rtt_ms: l.rtt_ms });
    }
  }
  return { links, linksPending };
}

export function modelFacts(model: ModelRecord): ModelFacts {
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

function describe(c: NodeCapacity): string {
  return `node ${c.name} (${c.node_id}) is not a candidate (${c.unavailable!.health_code}: ${c.unavailable!.message})`;
}

/**
 * Explains a refusal reached with unhealthy nodes left out. When counting them as healthy would have
 * placed the model (or they were the only candidates), the answer is node_unhealthy naming the first
 * one the placement needed; otherwise the refusal stands, with the left-out nodes named.
 */
function withUnhealthy(
  r1: ClusterRefusal,
  unhealthy: readonly NodeCapacity[],
  asIfHealthy: () => ClusterPlacementResult,
): ClusterRefusal {
  if (unhealthy.length === 0) return r1;
  if (r1.code === "info_pending" || r1.code === "invalid_request") return r1;
  if (r1.code === "tensor_unsupported") return r1;
  const r2 = asIfHealthy();
  if (r2.ok || r1.code === "all_excluded" || r1.code === "no_cycle") {
    const used = r2.ok ? new Set(r2.shares.map((s) => s.node_id)) : new Set<string>();
    const blame = unhealthy.find((c) => used.has(c.node_id)) ?? unhealthy[0]!;
    return {
      ok: false,
      code: "node_unhealthy",
      message: `${describe(blame)}; without it: ${r1.message}`,
      node_id: blame.node_id,
      health_code: blame.unavailable!.health_code,
    };
  }
  return { ...r1, message: `${r1.message}; ${unhealthy.map(describe).join("; ")}` };
}

function baseInput(state: ControlState, reports: readonly NodeReport[], req: ClusterRequest) {
  const caps = nodeCapacities(state, reports);
  const nodes: CandidateNode[] = caps.map((c) => ({
    node_id: c.node_id,
    name: c.name,
    free_bytes: c.free_bytes,
    ...(c.gpus_free_bytes ? { gpus_free_bytes: c.gpus_free_bytes } : {}),
  }));
  const userExcluded = new Set(req.excluded ?? []);
  const unhealthy = caps.filter((c) => c.unavailable && !userExcluded.has(c.node_id));
  return {
    caps,
    unhealthy,
    input: {
      nodes,
      ...clusterLinks(state, reports),
      model: modelFacts(req.model),
      excluded: [...userExcluded],
      memory: req.memory ?? {},
    },
    excludedAll: [...userExcluded, ...unhealthy.map((c) => c.node_id)],
  };
}

/** Says how much of the blamed node's memory instances already placed there reserve. */
function reservationNote(node: NodeCapacity | undefined): string {
  if (!node || node.reserved_bytes <= 0 || node.total_bytes === null) return "";
  return (
    ` (${gb(node.reserved_bytes)} GB of its ${gb(node.total_bytes)} GB is reserved by instances ` +
    `already placed there; it reports ${gb(node.reported_free_bytes ?? 0)} GB free)`
  );
}

function strip(
  r: ReturnType<typeof place>,
  caps: readonly NodeCapacity[],
  contextSize: number,
): ClusterPlacementResult {
  if (r.ok) return { ...r, context_size: contextSize };
  const blamed = r.node_id !== undefined ? caps.find((c) => c.node_id === r.node_id) : undefined;
  return {
    ok: false,
    code: r.code,
    message: r.code === "insufficient_memory" ? r.message + reservationNote(blamed) : r.message,
    ...(r.node_id !== undefined ? { node_id: r.node_id } : {}),
  };
}

/**
 * place() over the cluster: members with their capacity (reported memory minus reservations),
 * links from their reports, unhealthy members left out (node_unhealthy when that is why it fails).
 */
export function placeInCluster(
  state: ControlState,
  reports: readonly NodeReport[],
  req: ClusterRequest,
): ClusterPlacementResult {
  if (req.memory?.contextSize !== undefined) return placeAt(state, reports, req);
  // The largest context that fits: only a lack of memory makes a smaller one worth trying.
  let last: ClusterPlacementResult | undefined;
  for (const contextSize of contextLadder(modelFacts(req.model))) {
    last = placeAt(state, reports, { ...req, memory: { ...req.memory, contextSize } });
    if (last.ok || last.code !== "insufficient_memory") return last;
  }
  return last!;
}

function placeAt(
  state: ControlState,
  reports: readonly NodeReport[],
  req: ClusterRequest,
): ClusterPlacementResult {
  const b = baseInput(state, reports, req);
  const ctx = effectiveContext(b.input.model, resolveMemoryModel(req.memory));
  if (req.sharding === "Tensor" && req.minNodes > 1) {
    const refused = tensorAcrossNodesRefusal(b.caps, new Set(b.excludedAll), req.minNodes);
    if (refused) return refused;
  }
  const k = { minNodes: req.minNodes, sharding: req.sharding };
  const r1 = strip(place({ ...b.input, ...k, excluded: b.excludedAll }), b.caps, ctx);
  if (r1.ok) return r1;
  return withUnhealthy(r1, b.unhealthy, () => strip(place({ ...b.input, ...k }), b.caps, ctx));
}

export interface ClusterPreviewEntry {
  readonly sharding: Sharding;
  readonly nodes: number;
  readonly result: ClusterPlacementResult;
}

/**
 * previews() over the cluster, with the same capacity and health rules as placeInCluster (and,
 * without a configured context, its choice of context per entry).
 */
export function previewCluster(
  state: ControlState,
  reports: readonly NodeReport[],
  req: Omit<ClusterRequest, "minNodes" | "sharding">,
): { capacities: NodeCapacity[]; previews: ClusterPreviewEntry[] } {
  if (req.memory?.contextSize !== undefined) return previewAt(state, reports, req);
  let out: ReturnType<typeof previewAt> | undefined;
  for (const contextSize of contextLadder(modelFacts(req.model))) {
    const at = previewAt(state, reports, { ...req, memory: { ...req.memory, contextSize } });
    // Each entry keeps the largest context at which it was answered by more than a lack of memory.
    out = out
      ? {
          capacities: out.capacities,
          previews: out.previews.map((e, i) =>
            !e.result.ok && e.result.code === "insufficient_memory" ? at.previews[i]! : e,
          ),
        }
      : at;
    if (out.previews.every((e) => e.result.ok || e.result.code !== "insufficient_memory")) break;
  }
  return out!;
}

function previewAt(
  state: ControlState,
  reports: readonly NodeReport[],
  req: Omit<ClusterRequest, "minNodes" | "sharding">,
): { capacities: NodeCapacity[]; previews: ClusterPreviewEntry[] } {
  const b = baseInput(state, reports, { ...req, minNodes: 1, sharding: "Pipeline" });
  const ctx = effectiveContext(b.input.model, resolveMemoryModel(req.memory));
  const healthyOnly = previews({ ...b.input, excluded: b.excludedAll });
  let asIfHealthy: PreviewEntry[] | undefined;
  const excluded = new Set(b.excludedAll);
  const out = healthyOnly.map((e, i) => {
    const tensor =
      e.sharding === "Tensor" && e.nodes > 1
        ? tensorAcrossNodesRefusal(b.caps, excluded, e.nodes)
        : null;
    if (tensor) return { sharding: e.sharding, nodes: e.nodes, result: tensor };
    const r1 = strip(e.result, b.caps, ctx);
    if (r1.ok) return { sharding: e.sharding, nodes: e.nodes, result: r1 };
    const result = withUnhealthy(r1, b.unhealthy, () => {
      asIfHealthy ??= previews(b.input);
      return strip(asIfHealthy[i]!.result, b.caps, ctx);
    });
    return { sharding: e.sharding, nodes: e.nodes, result };
  });
  return { capacities: b.caps, previews: out };
}

/** What an instance's memory is counted at: its model's facts, KV cache bytes and memory model. */
interface MemoryBasis {
  facts: ModelFacts;
  kv: number;
  mem: ReturnType<typeof resolveMemoryModel>;
}

/** Whether one rank still fits its node: a member, healthy, its memory known and enough of it. */
function checkAssignment(
  c: NodeCapacity | undefined,
  a: Assignment,
  instance: Instance,
  { facts, kv, mem }: MemoryBasis,
): ClusterRefusal | null {
  if (!c) {
    return {
      ok: false,
      code: "all_excluded",
      message: `node ${a.node_id} is not a member of this session`,
      node_id: a.node_id,
    };
  }
  if (c.unavailable) {
    return {
      ok: false,
      code: "node_unhealthy",
      message: describe(c),
      node_id: c.node_id,
      health_code: c.unavailable.health_code,
    };
  }
  if (c.free_bytes === null) {
    return {
      ok: false,
      code: "info_pending",
      message: `memory of ${c.name} not yet known (telemetry not gossiped); retry in a few seconds`,
    };
  }
  const free = c.free_bytes;
  // What a refusal states: the share, its bytes and the node's free memory.
  const figures = (layers: number | undefined, fraction: number) => ({
    node_id: c.node_id,
    name: c.name,
    ...(layers !== undefined && instance.assignments.length > 1 ? { layers } : {}),
    fraction,
    weight_bytes: a.weight_bytes,
    kv_bytes: kv * fraction,
    required_bytes: a.required_bytes,
    free_bytes: free,
  });
  const tooLittle = (message: string) => ({
    ok: false as const,
    code: "insufficient_memory" as const,
    message: message + reservationNote(c),
    node_id: c.node_id,
  });
  if (!fits(a.required_bytes, free)) {
    const fraction = a.layers !== undefined ? a.layers / facts.layers : (a.fraction ?? 1);
    return tooLittle(
      memoryMessage(figures(a.layers, fraction), mem, facts.layers, instance.assignments.length),
    );
  }
  // A layer share spread over the node's GPUs: whole layers per GPU.
  const layers = a.layers ?? (instance.sharding === "Pipeline" ? facts.layers : undefined);
  const gpu =
    layers !== undefined ? gpuLayerFit(facts, layers, c.gpus_free_bytes ?? undefined, mem) : null;
  if (gpu && !gpu.fits) {
    const share = figures(layers, layers! / facts.layers);
    return tooLittle(gpuMemoryMessage(share, gpu, facts.layers, instance.assignments.length));
  }
  return null;
}

/** A decided instance to re-check: the instance, its model, and the memory model overrides. */
export interface InstanceCheck {
  readonly instance: Instance;
  readonly model: ModelRecord;
  readonly memory?: Partial<MemoryModel>;
}

/**
 * The sequencer's re-check of a decided instance against the current replica: every assigned node is
 * a healthy member whose capacity (after the instances already placed) still holds its share. Null
 * when it does; else the refusal, worded as place() words it.
 */
export function checkInstance(
  state: ControlState,
  reports: readonly NodeReport[],
  { instance, model, memory = {} }: InstanceCheck,
): ClusterRefusal | null {
  const caps = new Map(nodeCapacities(state, reports).map((c) => [c.node_id, c]));
  // The context placement chose for it is what its memory was counted at.
  const mem = resolveMemoryModel(
    instance.context_size !== undefined
      ? { ...memory, contextSize: instance.context_size }
      : memory,
  );
  const facts = modelFacts(model);
  const kv = kvCacheBytes(facts, mem);
  const n = instance.assignments.length;
  if (instance.sharding === "Tensor" && n > 1) {
    const used = new Set(instance.assignments.map((a) => a.node_id as string));
    const refused = tensorAcrossNodesRefusal(
      [...caps.values()].filter((c) => used.has(c.node_id)),
      new Set(),
      n,
    );
    if (refused) return refused;
  }
  for (const a of instance.assignments) {
    const refused = checkAssignment(caps.get(a.node_id), a, instance, { facts, kv, mem });
    if (refused) return refused;
  }
  return null;
}

/** A placement's shares as the assignments of an instance (peer keys from the replica's members). */
export function assignmentsOf(state: ControlState, shares: readonly NodeShare[]): Assignment[] {
  return shares.map((s) => ({
    node_id: s.node_id as NodeId,
    peer_key: state.members[s.node_id]!.peer_key,
    rank: s.rank,
    ...(s.layers !== undefined ? { layers: s.layers } : { fraction: s.fraction }),
    weight_bytes: Math.round(s.weight_bytes),
    required_bytes: Math.round(s.required_bytes),
  }));
}
