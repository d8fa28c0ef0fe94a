// Human-readable byte arithmetic for DownloadFailed: the operator sees exactly why a transfer did not start.
// Pure formatting so the staging client, store host and hub fallback all phrase it the same way.
import type { ModelId } from "@ic/protocol";
import type { CapacityArithmetic } from "./evict.ts";
import { GiB } from "@ic/protocol";

/** `12.50 GiB (13421772800 B)`: rounded for reading, exact for checking. */
export function formatBytes(bytes: number): string {
  return `${(bytes / GiB).toFixed(2)} GiB (${bytes} B)`;
}

export interface NoFitMessageInput extends CapacityArithmetic {
  readonly modelId: ModelId;
  /** Filesystem the check ran against (staging root, store path or model cache). */
  readonly path: string;
  /** Total bytes of the selected manifest; `requiredBytes` is what remains to be written. */
  readonly manifestBytes: number;
}

/**
 * The DownloadFailed reason when no safe disk fit exists, e.g.
 * `no safe disk fit for org/name on /data/staging: needs 2.00 GiB (..) additional of a 3.00 GiB (..)
 * manifest + 10.00 GiB (..) headroom = 12.00 GiB (..); free 5.00 GiB (..) + reclaimable idle 1.00 GiB
 * (..) = 6.00 GiB (..); short by 6.00 GiB (..); transfer not started`.
 */
export function noFitMessage(m: NoFitMessageInput): string {
  const need = m.requiredBytes + m.headroomBytes;
  const have = m.freeBytes + m.reclaimableBytes;
  return (
    `no safe disk fit for ${m.modelId} on ${m.path}: needs ${formatBytes(m.requiredBytes)} additional ` +
    `of a ${formatBytes(m.manifestBytes)} manifest + ${formatBytes(m.headroomBytes)} headroom = ` +
    `${formatBytes(need)}; free ${formatBytes(m.freeBytes)} + reclaimable idle ` +
    `${formatBytes(m.reclaimableBytes)} = ${formatBytes(have)}; short by ${formatBytes(Math.max(0, need - have))}; ` +
    `transfer not started`
  );
}
