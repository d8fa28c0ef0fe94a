// The per-node memory model: raw weight share x runtime-overhead factor, plus that share of the KV
// cache for the configured context, plus a fixed runner allowance. Never summed across nodes.
export interface ModelFacts {
  readonly model_id: string;
  /** Exact bytes of the weights (artifact bytes). */
  readonly weight_bytes: number;
  readonly layers: number;
  readonly context_length: number;
  readonly embedding_length: number;
  readonly head_count: number;
  readonly head_count_kv: number;
  readonly supports_tensor: boolean;
}

export interface MemoryModel {
  /** Multiplies raw weight bytes (activations, compute buffers, fragmentation). Default 1.2. */
  readonly overheadFactor: number;
  /** Fixed allowance per runner process (engine, CUDA context, scratch). Default 256 MiB. */
  readonly runnerBytes: number;
  /** Bytes per KV cache element (f16 = 2). */
  readonly kvBytesPerElement: number;
  /** Context the runner is started with; capped by the model's trained context. */
  readonly contextSize: number;
}

export const DEFAULT_MEMORY_MODEL: MemoryModel = {
  overheadFactor: 1.2,
  runnerBytes: 256 * 1024 ** 2,
  kvBytesPerElement: 2,
  contextSize: 4096,
};

/** Total KV cache bytes of the model at the configured context: K and V, every layer. */
export function kvCacheBytes(m: ModelFacts, mem: MemoryModel): number {
  const ctx = m.context_length > 0 ? Math.min(mem.contextSize, m.context_length) : mem.contextSize;
  const kvDim =
    m.head_count > 0 ? (m.embedding_length * m.head_count_kv) / m.head_count : m.embedding_length;
  return 2 * m.layers * ctx * kvDim * mem.kvBytesPerElement;
}

export interface ShareRequirement {
  readonly weight_bytes: number;
  readonly kv_bytes: number;
  readonly required_bytes: number;
}

/** What one node needs to hold `fraction` of the model. */
export function requirementFor(
  m: ModelFacts,
  fraction: number,
  mem: MemoryModel,
): ShareRequirement {
  const weight = m.weight_bytes * fraction;
  const kv = kvCacheBytes(m, mem) * fraction;
  return {
    weight_bytes: weight,
    kv_bytes: kv,
    required_bytes: weight * mem.overheadFactor + kv + mem.runnerBytes,
  };
}

export const GB = 1e9;
export function gb(bytes: number): string {
  return (bytes / GB).toFixed(2);
}

/**
 * Pipeline layer split: proportional to free memory, at least one layer each, summing to `layers`
 * (largest remainder). Returns null when there are fewer layers than nodes.
 */
export function splitLayers(layers: number, free: readonly number[]): number[] | null {
  const n = free.length;
  if (n === 0 || layers < n) return null;
  const total = free.reduce((s, f) => s + Math.max(0, f), 0);
  const ideal = free.map((f) => (total > 0 ? (Math.max(0, f) / total) * layers : layers / n));
  const out = ideal.map((x) => Math.max(1, Math.floor(x)));
  let sum = out.reduce((s, x) => s + x, 0);
  // The one-layer minimum can overshoot: take layers back from the ranks furthest above their ideal.
  while (sum > layers) {
    let j = -1;
    for (let i = 0; i < n; i++)
      if (out[i]! > 1 && (j < 0 || out[i]! - ideal[i]! > out[j]! - ideal[j]!)) j = i;
    out[j]! -= 1;
    sum -= 1;
  }
  // Largest remainder for what is left; ties go to the lower rank.
  const order = ideal.map((x, i) => ({ i, r: x - out[i]! })).sort((a, b) => b.r - a.r || a.i - b.i);
  for (let j = 0; sum < layers; j = (j + 1) % n, sum++) out[order[j]!.i]! += 1;
  return out;
}
