// Pure decisions of the event log: when to check free disk, which persistence mode follows a
import { MiB } from "@ic/protocol";
// check, when to compact the ring file and which archives to delete. The EventLog class owns the I/O.

export const MODES = ["normal", "counting-only"] as const;
export type Mode = (typeof MODES)[number];

/** Return to normal needs free space above the floor by 10% of the floor, and by at least this. */
export const MIN_RESUME_MARGIN_BYTES = 64 * MiB;

/** A disk check is due once `checkEvery` appends (written or counted) happened since the last one. */
export function shouldCheckDisk(appendsSinceCheck: number, checkEvery: number): boolean {
  return appendsSinceCheck >= Math.max(1, checkEvery);
}

/** Free bytes a check must see before counting-only mode returns to normal (floor + hysteresis). */
export function resumeThreshold(floorBytes: number): number {
  return floorBytes + Math.max(floorBytes * 0.1, MIN_RESUME_MARGIN_BYTES);
}

/**
 * The mode after a free-space check. Normal degrades when free space reaches the floor (<=);
 * counting-only returns to normal only above `resumeThreshold(floor)`, so a disk hovering at the
 * floor does not flap between modes on every check.
 */
export function nextMode(mode: Mode, freeBytes: number, floorBytes: number): Mode {
  switch (mode) {
    case "normal":
      return freeBytes <= floorBytes ? "counting-only" : "normal";
    case "counting-only":
      return freeBytes > resumeThreshold(floorBytes) ? "normal" : "counting-only";
  }
}

export interface CompactionLimits {
  /** compact_above_mb in bytes. */
  readonly compactAboveBytes: number;
  /** keep_events: records the rewritten active file keeps. */
  readonly keepEvents: number;
  /**
   * Size of the active file right after the last compaction (0 when none happened in this process).
   * When keep_events records alone exceed the threshold, compaction waits until the file doubled,
   * instead of rewriting the whole file on every append.
   */
  readonly keptBytesAfterLast: number;
}

export type CompactionPlan =
  { readonly compact: false } | { readonly compact: true; readonly keepEvents: number };

/** Compact when the active file is above compact_above_mb (and at least twice what the last compaction kept). */
export function planCompaction(activeBytes: number, limits: CompactionLimits): CompactionPlan {
  const threshold = Math.max(limits.compactAboveBytes, 2 * limits.keptBytesAfterLast);
  if (activeBytes > threshold) return { compact: true, keepEvents: limits.keepEvents };
  return { compact: false };
}

export interface ArchiveFile {
  readonly name: string;
  readonly bytes: number;
  /** Modification time, ms since the epoch. */
  readonly mtime: number;
}

export interface RotationPlan {
  /** Archives to delete, oldest first. */
  readonly remove: readonly string[];
  /** Archives kept, oldest first. */
  readonly keep: readonly ArchiveFile[];
  readonly keptBytes: number;
}

/**
 * Deletes archives oldest first (mtime, then name, whose timestamp sorts chronologically) until the
 * total is at most `totalLimitBytes`. The newest archive is deleted too when it alone is over the limit.
 */
export function planArchiveRotation(
  archives: readonly ArchiveFile[],
  totalLimitBytes: number,
): RotationPlan {
  const sorted = [...archives].sort(
    (a, b) => a.mtime - b.mtime || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0),
  );
  let total = sorted.reduce((sum, a) => sum + a.bytes, 0);
  const remove: string[] = [];
  let i = 0;
  while (total > totalLimitBytes && i < sorted.length) {
    const oldest = sorted[i++] as ArchiveFile;
    remove.push(oldest.name);
    total -= oldest.bytes;
  }
  return { remove, keep: sorted.slice(i), keptBytes: total };
}
