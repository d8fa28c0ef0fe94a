// Free-space and filesystem-identity queries behind a narrow interface, so tests can fake a small disk.
// The real implementation uses fs.statfs (free = blocks available to unprivileged users) and stat().dev.
import { stat, statfs } from "node:fs/promises";

export interface VolumeSpace {
  /** Bytes an unprivileged writer can still allocate. */
  readonly freeBytes: number;
  readonly totalBytes: number;
}

export interface Disk {
  /** Space on the filesystem holding `path` (which must exist). */
  space(path: string): Promise<VolumeSpace>;
  /** True when both existing paths live on the same filesystem, so hardlinks between them work. */
  sameFilesystem(a: string, b: string): Promise<boolean>;
}

export const nodeDisk: Disk = {
  async space(path) {
    const s = await statfs(path);
    return { freeBytes: s.bavail * s.bsize, totalBytes: s.blocks * s.bsize };
  },
  async sameFilesystem(a, b) {
    const [sa, sb] = await Promise.all([stat(a), stat(b)]);
    return sa.dev === sb.dev;
  },
};
