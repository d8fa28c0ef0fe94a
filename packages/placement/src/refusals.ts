// A placement's typed refusals and the messages operators read (the codes are @ic/protocol's).
// One place for the wording so every refusal names the node and shows the GB arithmetic the same way.
import type { PlacementRefusalCode } from "@ic/protocol";
import { gb } from "./memory.ts";
import type { GpuFit, MemoryModel } from "./memory.ts";

/** A placement's refusal codes: declared once, in @ic/protocol (their HTTP statuses: httpStatusFor). */
export type RefusalCode = PlacementRefusalCode;

/** A typed refusal: the code, an operator-readable message, the node at fault. */
export interface Refusal {
  readonly ok: false;
  readonly code: RefusalCode;
  readonly message: string;
  /** The node that cannot fit its share (insufficient_memory only). */
  readonly node_id?: string;
}

export function refusal(code: RefusalCode, message: string, node_id?: string): Refusal {
  return {
    ok: false,
    code,
    message,
    ...(node_id !== undefined ? { node_id } : {}),
  };
}

/** The itemized share a refusal message explains. */
export interface ShareFigures {
  readonly node_id: string;
  readonly name: string;
  readonly layers?: number;
  readonly fraction: number;
  readonly weight_bytes: number;
  readonly kv_bytes: number;
  readonly required_bytes: number;
  readonly free_bytes: number;
}

/** Which part of the model the share is, in words. */
export function shareWords(s: ShareFigures, totalLayers: number, nodes: number): string {
  if (nodes === 1) return "the whole model";
  if (s.layers !== undefined) return `${s.layers} of ${totalLayers} layers`;
  return `1/${nodes} of every tensor`;
}

/**
 * "node gpu-a (n-1f2e) cannot fit its share (6 of 32 layers): needs 12.67 GB (10.00 GB weights x
 * 1.20 overhead + 0.17 GB KV cache + 0.50 GB runner) but has 12.50 GB free".
 */
export function memoryMessage(
  s: ShareFigures,
  mem: MemoryModel,
  totalLayers: number,
  nodes: number,
): string {
  const equal = gb(s.required_bytes) === gb(s.free_bytes);
  return (
    `node ${s.name} (${s.node_id}) cannot fit its share (${shareWords(s, totalLayers, nodes)}): ` +
    `needs ${gb(s.required_bytes)} GB (${gb(s.weight_bytes)} GB weights x ` +
    `${mem.overheadFactor.toFixed(2)} overhead + ${gb(s.kv_bytes)} GB KV cache + ` +
    `${gb(mem.runnerBytes)} GB runner) but has ${gb(s.free_bytes)} GB free` +
    (equal ? " (a share must be strictly less than free memory)" : "")
  );
}

/**
 * "node gpu-a (n-1f2e) cannot fit its share (the whole model) on its 2 GPUs: spread by free memory,
 * whole layers each, GPU 1 would hold 1 of 2 layers and need 24.27 GB (its layers and KV cache x
 * overhead + its runner allowance) but has 24.00 GB free; the node has 48.00 GB free in all, and a
 * layer cannot be divided between GPUs (Tensor with min_nodes 1 splits every layer across them)".
 */
export function gpuMemoryMessage(
  s: ShareFigures,
  g: GpuFit,
  totalLayers: number,
  nodes: number,
): string {
  const shareLayers = s.layers ?? totalLayers;
  return (
    `node ${s.name} (${s.node_id}) cannot fit its share (${shareWords(s, totalLayers, nodes)}) on ` +
    `its ${g.gpus} GPUs: spread by free memory, whole layers each, GPU ${g.gpu} would hold ` +
    `${g.layers} of ${shareLayers} layers and need ${gb(g.need_bytes)} GB (its layers and KV cache ` +
    `x overhead + its runner allowance) but has ${gb(g.free_bytes)} GB free; the node has ` +
    `${gb(s.free_bytes)} GB free in all, and a layer cannot be divided between GPUs` +
    (nodes === 1 ? " (Tensor sharding splits every layer across a node's GPUs)" : "")
  );
}
