// Replicas that follow load (docs/capacity.md): for each replica set with a scale policy, whether to
// add a replica or remove one now. Pure: the requests in flight (the gateways' heartbeats), the time and
// what was seen before (the windows) come from the caller; the master's tick is the shell. With
// hysteresis: it grows while the requests in flight stay above `up_at` per ready replica for the up
// window, and shrinks only when one replica fewer would hold at most half of `up_at` each, for the
// down window, and not within a down window of its last change. Nothing is decided while a replica
// of the set is not ready yet (one that is loading counts toward the target, not the load). A
// shrink drains before it breaks: the step retires a replica (gateways stop sending it requests),
// and the next step removes it once its requests have ended (or after `retireMs`); load that comes
// back meanwhile recalls it instead of placing a new one.
import { runnerKey } from "@ic/protocol";
import type { ControlState, Deployment, ScalePolicy } from "@ic/protocol";

export interface ScaleWindows {
  /** Requests above the threshold for this long add a replica. */
  readonly upMs: number;
  /** Quiet for this long (and as long since the last change) retires one. */
  readonly downMs: number;
  /**
   * A retiring replica is removed after this long even if its heartbeat counts still show requests
   * (the node passes its longest request, chat.total_timeout_ms, and the task table's margin).
   */
  readonly retireMs: number;
}

export const DEFAULT_SCALE_WINDOWS: ScaleWindows = {
  upMs: 10_000,
  downMs: 60_000,
  retireMs: 960_000,
};

/** What the rule remembers of a set between ticks. */
export interface ScaleMemo {
  readonly aboveSince?: number;
  readonly belowSince?: number;
  readonly changedAt?: number;
}

/** One set as the rule reads it. */
export interface ScaleSet {
  readonly replica_set: string;
  readonly policy: ScalePolicy;
  readonly deployments: readonly Deployment[];
  /** Of those, the ones whose instance's rank 0 is ready. */
  readonly ready: number;
  /** Requests in flight on the set's instances (the retiring one's included). */
  readonly inFlight: number;
  /** Its replica that retires (at most one at a time): since when, and its requests in flight. */
  readonly retiring?: { readonly since: number; readonly inFlight: number };
}

export type ScaleStep =
  | { readonly memo: ScaleMemo; readonly direction?: undefined }
  | { readonly memo: ScaleMemo; readonly direction: "up" | "down"; readonly reason: string };

/** A replica set as the state holds it (a placement with replicas, or one that follows load). */
export interface ReplicaSet {
  readonly replica_set: string;
  readonly deployments: readonly Deployment[];
  /** Its scale policy, when it follows load (its first deployment's). */
  readonly scale: ScalePolicy | undefined;
  /** Of its deployments, those whose instance's rank 0 is ready. */
  readonly ready: number;
  /** Requests in flight on its instances. */
  readonly inFlight: number;
  /** The deployment a scale-down retires (at most one at a time: decide-scale.ts). */
  readonly retiring: Deployment | undefined;
}

/** Every replica set, with its ready count and requests in flight (GET /state shows them). */
export function replicaSets(
  state: ControlState,
  inFlight: (instanceId: string) => number,
): ReplicaSet[] {
  const sets = new Map<string, Deployment[]>();
  for (const d of Object.values(state.deployments))
    if (d.replica_set) sets.set(d.replica_set, [...(sets.get(d.replica_set) ?? []), d]);
  return [...sets.entries()].map(([replica_set, deployments]) => ({
    replica_set,
    deployments,
    scale: deployments[0]!.scale,
    ready: deployments.filter(
      (d) => state.runners[runnerKey(d.instance_id, 0)]?.state === "RunnerReady",
    ).length,
    inFlight: deployments.reduce((s, d) => s + inFlight(d.instance_id), 0),
    retiring: deployments.find((d) => d.retiring_since !== undefined),
  }));
}

/** The replica sets with a scale policy: what the rule decides for. */
export function scaleSets(
  state: ControlState,
  inFlight: (instanceId: string) => number,
): ScaleSet[] {
  return replicaSets(state, inFlight).flatMap(({ scale, retiring: r, ...set }) => {
    if (!scale) return [];
    const retiring =
      r?.retiring_since !== undefined
        ? { retiring: { since: r.retiring_since, inFlight: inFlight(r.instance_id) } }
        : {};
    return [{ ...set, policy: scale, ...retiring }];
  });
}

/** The step for one set at `now`, from what was seen before (`memo`). */
export function scaleStep(
  set: ScaleSet,
  memo: ScaleMemo,
  now: number,
  w: ScaleWindows = DEFAULT_SCALE_WINDOWS,
): ScaleStep {
  const { min_replicas: min, max_replicas: max, up_at: upAt } = set.policy;
  const changed = memo.changedAt !== undefined ? { changedAt: memo.changedAt } : {};
  const r = set.retiring;
  // A retiring replica goes once its requests have ended, whatever else the set is doing (its
  // instance may be lost: the reconcile does not place a retiring deployment again).
  if (r && (r.inFlight === 0 || now - r.since >= w.retireMs))
    return {
      memo: changed,
      direction: "down",
      reason:
        r.inFlight === 0
          ? `the retiring replica's requests ended after ${secs(now - r.since)}: removed`
          : `the retiring replica still counted ${r.inFlight} request(s) in flight after ${secs(now - r.since)}: removed`,
    };
  // A replica loading (or pending) counts toward the target: no decision until it serves.
  if (set.ready < set.deployments.length || set.ready === 0) return { memo: changed };
  // The replicas that take new requests: the retiring one's load moves to them.
  const n = set.deployments.length - (r ? 1 : 0);
  const each = set.inFlight / n;
  if (each > upAt && (r || n < max)) {
    const aboveSince = memo.aboveSince ?? now;
    if (now - aboveSince < w.upMs) return { memo: { ...changed, aboveSince } };
    const more = r ? "the retiring replica kept" : `one more (at most ${max})`;
    return {
      memo: { changedAt: now },
      direction: "up",
      reason: `${set.inFlight} requests in flight on ${n} ready replica(s), above ${upAt} each for ${secs(now - aboveSince)}: ${more}`,
    };
  }
  // Its requests still end on the retiring replica: no other step until it has gone.
  if (r) return { memo: changed };
  if (n > min && set.inFlight <= ((n - 1) * upAt) / 2) {
    const belowSince = memo.belowSince ?? now;
    const quiet = now - belowSince >= w.downMs;
    const settled = memo.changedAt === undefined || now - memo.changedAt >= w.downMs;
    if (!quiet || !settled) return { memo: { ...changed, belowSince } };
    return {
      memo: { changedAt: now },
      direction: "down",
      reason: `${set.inFlight} requests in flight on ${n} replicas for ${secs(now - belowSince)}: ${n - 1} hold them within half of ${upAt} each; one retires (at least ${min})`,
    };
  }
  return { memo: changed };
}

function secs(ms: number): string {
  return `${Math.round(ms / 100) / 10} s`;
}
