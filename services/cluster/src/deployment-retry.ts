// When the master tries a lost deployment again: pure back-off over what it last saw. A refused
// placement is retried after 1 s, doubling to 30 s; a change in membership, health or free memory
// (the capacity view) makes it due again after 1 s, since the refusal may no longer hold.
import type { NodeCapacity } from "@ic/placement";
import { MiB } from "@ic/protocol";

export const RETRY_FIRST_MS = 1000;
export const RETRY_MAX_MS = 30_000;
/** The least wait after an attempt, even when the view changed (bounds work under churn). */
export const RETRY_ON_CHANGE_MS = 1000;

/** One deployment's last attempt: when, the wait before the next, and the view it was tried on. */
export interface RetryEntry {
  readonly at: number;
  readonly delayMs: number;
  readonly view: string;
}

/** Whether a deployment with this history may be tried at `now` on `view`. */
export function retryDue(r: RetryEntry | undefined, now: number, view: string): boolean {
  if (!r) return true;
  return now >= r.at + r.delayMs || (r.view !== view && now >= r.at + RETRY_ON_CHANGE_MS);
}

/** The history after an attempt at `now` on `view`: the wait doubles, up to RETRY_MAX_MS. */
export function afterAttempt(r: RetryEntry | undefined, now: number, view: string): RetryEntry {
  return {
    at: now,
    delayMs: r ? Math.min(RETRY_MAX_MS, r.delayMs * 2) : RETRY_FIRST_MS,
    view,
  };
}

/**
 * What placement saw, in a string that changes when a retry could turn out differently: each node,
 * its free memory in 64 MiB steps (unknown as "?"), and why it is unavailable, if it is.
 */
export function capacityView(capacities: readonly NodeCapacity[]): string {
  return capacities
    .map(
      (c) =>
        `${c.node_id}:${c.free_bytes === null ? "?" : Math.floor(c.free_bytes / (64 * MiB))}:${c.unavailable?.health_code ?? ""}`,
    )
    .join(",");
}
