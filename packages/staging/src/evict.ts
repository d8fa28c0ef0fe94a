// planEviction: the pure decision of which staged model copies to delete, for the four trigger points.
// Implements Eviction rules 1-9 of the cluster operations spec; the staging client performs the deletes.
import type { ModelId } from "@ic/protocol";

export const EVICTION_TRIGGERS = ["deactivation", "startup", "capacity", "purge"] as const;
export type EvictionTrigger = (typeof EVICTION_TRIGGERS)[number];

/** One staged copy under the staging root, as the staging client sees it right now. */
export interface StagedCopy {
  readonly modelId: ModelId;
  /** Bytes the copy occupies on the staging filesystem (complete files plus resumable partials). */
  readonly bytes: number;
  /**
   * Bytes that deleting the copy would actually return to the filesystem. Files hardlinked from the
   * store free nothing. Defaults to `bytes`.
   */
  readonly freeableBytes?: number;
  /** Last-use time (ms since epoch); orders recency eviction. */
  readonly lastUsedMs: number;
  /** A live runner names this model directly. */
  readonly inUse: boolean;
  /** The model is a companion (MTP sidecar, drafter, split vision weights) of an active model. */
  readonly companionOfActive: boolean;
  /** A transfer into this copy is running now. */
  readonly downloading: boolean;
}

/** Inputs of the pre-download capacity pass (rule 6). */
export interface CapacityRequest {
  /** Exact additional bytes the transfer will write: manifest total minus resumable and hardlinked bytes. */
  readonly requiredBytes: number;
  /** Free bytes on the staging filesystem now. */
  readonly freeBytes: number;
  /** Free bytes that must remain after the transfer (10 GiB by default). */
  readonly headroomBytes: number;
  /** Never deleted by this pass: the incoming partial model and its companions. */
  readonly protectedIds: readonly ModelId[];
}

export interface EvictionInput {
  readonly trigger: EvictionTrigger;
  readonly staged: readonly StagedCopy[];
  /** staging_keep_recent_gb in bytes: grace budget of recent idle copies for lifecycle passes. */
  readonly keepRecentBytes: number;
  readonly cleanupOnDeactivate: boolean;
  /** Purge only: restrict the reset to this model. */
  readonly purgeModelId?: ModelId | undefined;
  /** Required when trigger is "capacity". */
  readonly capacity?: CapacityRequest | undefined;
}

/** Why a copy is deleted. */
export type EvictionReason = "beyond_keep_recent" | "capacity" | "purge";
/** Why a copy that the trigger would otherwise consider is kept. */
export type KeepReason =
  | "in_use"
  | "companion_of_active"
  | "downloading"
  | "protected"
  | "within_keep_recent"
  | "not_needed"
  | "cleanup_disabled"
  | "not_named";

export interface EvictionItem {
  readonly modelId: ModelId;
  readonly reason: EvictionReason;
  readonly bytes: number;
  readonly freeableBytes: number;
}

export interface KeptItem {
  readonly modelId: ModelId;
  readonly reason: KeepReason;
}

export interface EvictionPlan {
  readonly trigger: EvictionTrigger;
  /** Model ids to delete, in deletion order. */
  readonly delete: ModelId[];
  /** One entry per deleted copy, same order as `delete`. */
  readonly items: EvictionItem[];
  /** Every other copy, with the reason it stays. */
  readonly kept: KeptItem[];
  /** Sum of freeableBytes over `items`. */
  readonly freedBytes: number;
  /** Capacity pass only: true when the transfer fits with the headroom after the deletes. */
  readonly fits?: boolean;
  /**
   * Capacity pass only, when it does not fit: bytes still missing after every safe deletion.
   * Nothing is deleted in that case (rule 6: the transfer does not start).
   */
  readonly shortfallBytes?: number;
  /** Capacity pass only: the arithmetic behind `fits`, for the DownloadFailed message. */
  readonly capacity?: CapacityArithmetic;
}

export interface CapacityArithmetic {
  readonly requiredBytes: number;
  readonly headroomBytes: number;
  readonly freeBytes: number;
  /** Bytes the pass could free from idle, unprotected copies. */
  readonly reclaimableBytes: number;
}

/** Rule 3 plus protection: the reason a copy may not be deleted, or null when it is a candidate. */
function protection(copy: StagedCopy, protectedIds: ReadonlySet<ModelId>): KeepReason | null {
  if (copy.inUse) return "in_use";
  if (copy.companionOfActive) return "companion_of_active";
  if (copy.downloading) return "downloading";
  if (protectedIds.has(copy.modelId)) return "protected";
  return null;
}

const freeable = (c: StagedCopy): number => c.freeableBytes ?? c.bytes;

/** Newest first; ties broken by model id so plans are deterministic. */
const newestFirst = (a: StagedCopy, b: StagedCopy): number =>
  b.lastUsedMs - a.lastUsedMs || (a.modelId < b.modelId ? -1 : a.modelId > b.modelId ? 1 : 0);

function item(c: StagedCopy, reason: EvictionReason): EvictionItem {
  return { modelId: c.modelId, reason, bytes: c.bytes, freeableBytes: freeable(c) };
}

function finish(
  trigger: EvictionTrigger,
  items: EvictionItem[],
  kept: KeptItem[],
  extra: Partial<EvictionPlan> = {},
): EvictionPlan {
  return {
    trigger,
    delete: items.map((i) => i.modelId),
    items,
    kept,
    freedBytes: items.reduce((s, i) => s + i.freeableBytes, 0),
    ...extra,
  };
}

/**
 * Decide which staged copies to delete.
 *
 * - deactivation / startup (lifecycle, rules 2-5, 9): only when cleanupOnDeactivate; idle candidates
 *   are kept newest-first while their running total stays within keepRecentBytes, and every older one
 *   is deleted. keepRecentBytes = 0 deletes every idle candidate (strict evict-on-deactivate).
 * - capacity (rule 6): independent of cleanupOnDeactivate; when free < required + headroom, idle
 *   unprotected copies are deleted oldest-first (ignoring the grace budget) until it fits. When even
 *   deleting all of them cannot make it fit, nothing is deleted and `fits` is false.
 * - purge (rule 2): every idle copy (or only purgeModelId), regardless of budget and cleanup flag.
 */
export function planEviction(input: EvictionInput): EvictionPlan {
  switch (input.trigger) {
    case "deactivation":
    case "startup":
      return planLifecycle(input);
    case "capacity":
      return planCapacity(input);
    case "purge":
      return planPurge(input);
  }
}

function planLifecycle(input: EvictionInput): EvictionPlan {
  const kept: KeptItem[] = [];
  const items: EvictionItem[] = [];
  const none = new Set<ModelId>();
  const sorted = [...input.staged].sort(newestFirst);
  if (!input.cleanupOnDeactivate) {
    for (const c of sorted)
      kept.push({ modelId: c.modelId, reason: protection(c, none) ?? "cleanup_disabled" });
    return finish(input.trigger, items, kept);
  }
  const budget = Math.max(0, input.keepRecentBytes);
  let used = 0;
  let overflowed = false;
  for (const c of sorted) {
    const why = protection(c, none);
    if (why) {
      kept.push({ modelId: c.modelId, reason: why });
      continue;
    }
    // The grace budget is a prefix of the newest candidates: once one does not fit, every older
    // candidate is beyond it, even a small one that would still fit.
    if (!overflowed && budget > 0 && used + c.bytes <= budget) {
      used += c.bytes;
      kept.push({ modelId: c.modelId, reason: "within_keep_recent" });
    } else {
      overflowed = true;
      items.push(item(c, "beyond_keep_recent"));
    }
  }
  // Delete oldest first, so an interrupted pass leaves the most recent data behind.
  items.reverse();
  return finish(input.trigger, items, kept);
}

function planCapacity(input: EvictionInput): EvictionPlan {
  const cap = input.capacity;
  if (!cap) throw new Error("planEviction: trigger 'capacity' needs a capacity request");
  const protectedIds = new Set(cap.protectedIds);
  const oldestFirst = [...input.staged].sort(newestFirst).reverse();
  const candidates: StagedCopy[] = [];
  const kept: KeptItem[] = [];
  for (const c of oldestFirst) {
    const why = protection(c, protectedIds);
    if (why) kept.push({ modelId: c.modelId, reason: why });
    else candidates.push(c);
  }
  const need = cap.requiredBytes + cap.headroomBytes;
  const reclaimableBytes = candidates.reduce((s, c) => s + freeable(c), 0);
  const arithmetic: CapacityArithmetic = {
    requiredBytes: cap.requiredBytes,
    headroomBytes: cap.headroomBytes,
    freeBytes: cap.freeBytes,
    reclaimableBytes,
  };
  if (cap.freeBytes + reclaimableBytes < need) {
    for (const c of candidates) kept.push({ modelId: c.modelId, reason: "not_needed" });
    return finish("capacity", [], kept, {
      fits: false,
      shortfallBytes: need - cap.freeBytes - reclaimableBytes,
      capacity: arithmetic,
    });
  }
  const items: EvictionItem[] = [];
  let free = cap.freeBytes;
  for (const c of candidates) {
    // Copies that free nothing (hardlinked from the store) are never worth deleting here.
    if (free >= need || freeable(c) === 0) kept.push({ modelId: c.modelId, reason: "not_needed" });
    else {
      items.push(item(c, "capacity"));
      free += freeable(c);
    }
  }
  return finish("capacity", items, kept, { fits: true, shortfallBytes: 0, capacity: arithmetic });
}

function planPurge(input: EvictionInput): EvictionPlan {
  const none = new Set<ModelId>();
  const items: EvictionItem[] = [];
  const kept: KeptItem[] = [];
  for (const c of [...input.staged].sort(newestFirst).reverse()) {
    if (input.purgeModelId !== undefined && c.modelId !== input.purgeModelId) {
      kept.push({ modelId: c.modelId, reason: "not_named" });
      continue;
    }
    const why = protection(c, none);
    if (why) kept.push({ modelId: c.modelId, reason: why });
    else items.push(item(c, "purge"));
  }
  return finish("purge", items, kept);
}
