// The per-node memory model: a node's weight share x runtime-overhead factor, plus its share of the KV
// cache at the configured context, plus a fixed runner allowance. Memory is never summed across nodes.

/** What the placement needs to know about a model (the gateway fills it from the GGUF header). */
export interface ModelFacts {
  readonly model_id: string;
  /** Exact bytes of the weights (artifact bytes). */
  readonly weight_bytes: number;
  /** Transformer blocks (GGUF `<arch>.block_count`); Pipeline splits these. */
  readonly layers: number;
  /** Trained context (`<arch>.context_length`); 0 when unknown. Caps the configured context. */
  readonly context_length: number;
  /** Hidden size (`<arch>.embedding_length`). */
  readonly embedding_length: number;
  /** Attention heads (`<arch>.attention.head_count`); 0 when unknown. */
  readonly head_count: number;
  /** KV heads (`<arch>.attention.head_count_kv`); equals head_count without GQA; 0 when unknown. */
  readonly head_count_kv: number;
  /** Per-head K width (`<arch>.attention.key_length`); default embedding_length / head_count. */
  readonly key_length?: number;
  /** Per-head V width (`<arch>.attention.value_length`); default key_length. */
  readonly value_length?: number;
  /** Whether the architecture is one the engine can split by rows (`-sm row`). */
  readonly supports_tensor: boolean;
}

/** Tunables of the memory model; every field has a documented default (DEFAULT_MEMORY_MODEL). */
export interface MemoryModel {
  /** Multiplies raw weight bytes (activations, compute buffers, fragmentation). Default 1.2. */
  readonly overheadFactor: number;
  /** Fixed allowance per runner process (engine, CUDA context, scratch). Default 256 MiB. */
  readonly runnerBytes: number;
  /** Bytes per KV cache element (f16 = 2, q8_0 ≈ 1.0625). Default 2. */
  readonly kvBytesPerElement: number;
  /** Context the runner is started with; capped by the model's trained context. Default 4096. */
  readonly contextSize: number;
}

export const DEFAULT_MEMORY_MODEL: MemoryModel = Object.freeze({
  overheadFactor: 1.2,
  runnerBytes: 256 * 1024 ** 2,
  kvBytesPerElement: 2,
  contextSize: 4096,
});

/** Defaults overlaid with the caller's overrides (undefined fields keep the default). */
export function resolveMemoryModel(over: Partial<MemoryModel> = {}): MemoryModel {
  const pick = (k: keyof MemoryModel): number => over[k] ?? DEFAULT_MEMORY_MODEL[k];
  return {
    overheadFactor: pick("overheadFactor"),
    runnerBytes: pick("runnerBytes"),
    kvBytesPerElement: pick("kvBytesPerElement"),
    contextSize: pick("contextSize"),
  };
}

/** Why a memory model cannot be used, or null when it is sound. */
export function invalidMemoryModel(mem: MemoryModel): string | null {
  if (!(mem.overheadFactor >= 1) || !Number.isFinite(mem.overheadFactor))
    return "memory.overheadFactor must be a finite number >= 1";
  if (!(mem.runnerBytes >= 0) || !Number.isFinite(mem.runnerBytes))
    return "memory.runnerBytes must be a finite number >= 0";
  if (!(mem.kvBytesPerElement >= 0) || !Number.isFinite(mem.kvBytesPerElement))
    return "memory.kvBytesPerElement must be a finite number >= 0";
  if (!Number.isInteger(mem.contextSize) || mem.contextSize < 1)
    return "memory.contextSize must be a positive integer";
  return null;
}

/** Why model facts cannot be placed, or null when they are sound. */
export function invalidModelFacts(m: ModelFacts): string | null {
  if (!Number.isInteger(m.layers) || m.layers < 1)
    return `model ${m.model_id} has no layer count (${m.layers}); its GGUF header is incomplete`;
  if (!(m.weight_bytes > 0) || !Number.isFinite(m.weight_bytes))
    return `model ${m.model_id} has no weight size (${m.weight_bytes} bytes)`;
  return null;
}

/** The smallest context an automatic choice goes down to (or the model's own, when smaller). */
export const MIN_AUTO_CONTEXT = 4096;

/**
 * The contexts an automatic choice tries, largest first: the model's trained context, halved while
 * above MIN_AUTO_CONTEXT, then MIN_AUTO_CONTEXT (or the trained one when smaller). A model whose
 * context is unknown gets MIN_AUTO_CONTEXT. Pure.
 */
export function contextLadder(m: Pick<ModelFacts, "context_length">): number[] {
  const trained = m.context_length;
  if (!(trained > 0)) return [MIN_AUTO_CONTEXT];
  const out: number[] = [];
  for (let c = trained; c > MIN_AUTO_CONTEXT; c = Math.floor(c / 2)) out.push(c);
  out.push(Math.min(trained, MIN_AUTO_CONTEXT));
  return out;
}

/** Context the runner actually gets: the configured one, capped by the trained context when known. */
export function effectiveContext(m: ModelFacts, mem: MemoryModel): number {
  return m.context_length > 0 ? Math.min(mem.contextSize, m.context_length) : mem.contextSize;
}

/**
 * Total KV cache bytes of the model at the effective context: for every layer and token, the K and V
 * widths (kv_heads x key_length, kv_heads x value_length) x bytes per element. key_length defaults to
 * embedding_length / head_count; with the head count unknown, K and V are each assumed as wide as the
 * embedding (no grouped-query saving), which can only overestimate.
 */
export function kvCacheBytes(m: ModelFacts, mem: MemoryModel): number {
  const heads = m.head_count > 0 ? m.head_count : 0;
  const kvHeads = m.head_count_kv > 0 ? m.head_count_kv : heads;
  let kWidth: number;
  if (m.key_length !== undefined && kvHeads > 0) kWidth = kvHeads * m.key_length;
  else if (heads > 0) kWidth = (kvHeads * m.embedding_length) / heads;
  else kWidth = m.embedding_length;
  const vWidth = m.value_length !== undefined && kvHeads > 0 ? kvHeads * m.value_length : kWidth;
  return m.layers * effectiveContext(m, mem) * (kWidth + vWidth) * mem.kvBytesPerElement;
}

/** What one node needs to hold a share of the model, itemized for the refusal message. */
export interface NodeRequirement {
  /** Raw weight bytes of the share. */
  readonly weight_bytes: number;
  /** The share's KV cache at the effective context. */
  readonly kv_bytes: number;
  /** The fixed runner allowance. */
  readonly runner_bytes: number;
  /** weight_bytes x overheadFactor + kv_bytes + runner_bytes; must be strictly below free memory. */
  readonly required_bytes: number;
}

/**
 * What one node needs to hold `fraction` of the model (Tensor: 1/k; Pipeline: its layers / total):
 * required = fraction x weight_bytes x overheadFactor + fraction x KV cache + runnerBytes.
 */
export function estimateNodeRequirement(
  m: ModelFacts,
  fraction: number,
  mem: MemoryModel = DEFAULT_MEMORY_MODEL,
): NodeRequirement {
  const weight = m.weight_bytes * fraction;
  const kv = kvCacheBytes(m, mem) * fraction;
  return {
    weight_bytes: weight,
    kv_bytes: kv,
    runner_bytes: mem.runnerBytes,
    required_bytes: weight * mem.overheadFactor + kv + mem.runnerBytes,
  };
}

/** The rule of the spec: a share fits only when it is strictly less than the node's free memory. */
export function fits(requiredBytes: number, freeBytes: number): boolean {
  return requiredBytes < freeBytes;
}

/**
 * Pipeline layer split: proportional to free memory, at least one layer each, integer counts summing
 * to `layers`, largest-remainder rounding (ties to the lower rank). Null when layers < nodes.
 */
export function splitLayers(layers: number, free: readonly number[]): number[] | null {
  const n = free.length;
  if (n === 0 || !Number.isInteger(layers) || layers < n) return null;
  let total = 0;
  for (const f of free) if (Number.isFinite(f) && f > 0) total += f;
  const ideal = new Float64Array(n);
  const out = new Array<number>(n);
  let sum = 0;
  for (let i = 0; i < n; i++) {
    const f = free[i]!;
    ideal[i] = total > 0 ? ((Number.isFinite(f) && f > 0 ? f : 0) / total) * layers : layers / n;
    out[i] = Math.max(1, Math.floor(ideal[i]!));
    sum += out[i]!;
  }
  // The one-layer minimum can overshoot: take layers back from the ranks furthest above their ideal.
  while (sum > layers) {
    let j = -1;
    for (let i = 0; i < n; i++) {
      if (out[i]! > 1 && (j < 0 || out[i]! - ideal[i]! > out[j]! - ideal[j]!)) j = i;
    }
    out[j]! -= 1;
    sum -= 1;
  }
  if (sum < layers) {
    // Largest remainder for what is left; ties go to the lower rank. At most n - 1 layers remain.
    const rem = (i: number) => ideal[i]! - out[i]!;
    const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => rem(b) - rem(a) || a - b);
    for (let j = 0; sum < layers; j = (j + 1) % n, sum++) out[order[j]!]! += 1;
  }
  return out;
}

export const GB = 1e9;

/** Bytes as decimal gigabytes with two decimals, as every message prints them. */
export function gb(bytes: number): string {
  return (bytes / GB).toFixed(2);
}

/** How a node's layer share lands on its GPUs, and the GPU that has the least room. */
export interface GpuFit {
  readonly fits: boolean;
  /** Smallest (free - need) / free over the GPUs. */
  readonly headroom: number;
  /** The GPU with the least headroom: its index among the node's GPUs, layers, need and free. */
  readonly gpu: number;
  readonly layers: number;
  readonly need_bytes: number;
  readonly free_bytes: number;
  /** The node's GPUs. */
  readonly gpus: number;
}

/**
 * A layer share on a node with several GPUs: llama.cpp spreads the share's layers over the node's
 * GPUs in proportion to their free memory, whole layers each, and every GPU also carries its own
 * runner allowance (its context and compute buffers). So 2 GPUs of 24 GB do not hold a share whose
 * single layers need more than 24 GB, though the node has 48 GB. Null where the rule does not apply
 * (fewer than 2 GPUs, or no layers).
 */
export function gpuLayerFit(
  m: ModelFacts,
  shareLayers: number,
  gpusFree: readonly number[] | undefined,
  mem: MemoryModel = DEFAULT_MEMORY_MODEL,
): GpuFit | null {
  if (!gpusFree || gpusFree.length < 2 || shareLayers < 1 || m.layers < 1) return null;
  const perLayer = (m.weight_bytes * mem.overheadFactor + kvCacheBytes(m, mem)) / m.layers;
  // With fewer layers than GPUs, they go to the GPUs with the most free memory.
  const order = gpusFree.map((f, i) => ({ f, i })).sort((a, b) => b.f - a.f || a.i - b.i);
  const used = order.slice(0, Math.min(shareLayers, order.length));
  const split = splitLayers(
    shareLayers,
    used.map((u) => u.f),
  )!;
  let ok = true;
  let worst: Omit<GpuFit, "fits"> | undefined;
  for (let j = 0; j < used.length; j++) {
    const u = used[j]!;
    const layers = split[j]!;
    const need = layers * perLayer + mem.runnerBytes;
    if (!fits(need, u.f)) ok = false;
    const headroom = (u.f - need) / Math.max(u.f, 1);
    if (worst === undefined || headroom < worst.headroom)
      worst = {
        headroom,
        gpu: u.i,
        layers,
        need_bytes: need,
        free_bytes: u.f,
        gpus: gpusFree.length,
      };
  }
  return { ...worst!, fits: ok };
}
