// Picks which ready instance of a model serves a request. Without a prefix key: fewest outstanding
// requests, then the lowest link latency from this node (a local rank 0 counts as 0), then the oldest.
// With one (prefix-key.ts), consistent hashing with bounded loads: the instances are ranked by
// rendezvous hash of the key and each instance id, the same order on every gateway, and the request
// goes to the first whose outstanding requests stay within `loadFactor` times the mean (counting
// this request), so a conversation keeps its replica (and its KV cache) while no replica is flooded
// or starved. Pure, so tables test it.
import { createHash } from "node:crypto";
import type { ReadyInstance } from "./readiness.ts";

/** How far above the mean load the preferred instance may go before a request moves on (25%). */
export const DEFAULT_LOAD_FACTOR = 1.25;

export interface BalanceInput {
  readonly outstanding: ReadonlyMap<string, number>;
  /** This node's peer key: an instance whose rank 0 runs here has latency 0. */
  readonly selfPeerKey: string;
  /** Measured round trip from this node to a peer (heartbeat links); undefined when unknown. */
  readonly rttMs: (peerKey: string) => number | undefined;
  /** The request's prefix key: requests with the same key prefer the same instance. */
  readonly prefixKey?: string | undefined;
  /** Bound of the preferred instance's load, as a multiple of the mean (DEFAULT_LOAD_FACTOR). */
  readonly loadFactor?: number | undefined;
}

/** The instance to send the next request to; undefined only for an empty list. */
export function chooseInstance(
  ready: readonly ReadyInstance[],
  o: BalanceInput,
): ReadyInstance | undefined {
  const load = (r: ReadyInstance) => o.outstanding.get(r.instance.instance_id) ?? 0;
  if (o.prefixKey !== undefined && ready.length > 1) {
    const total = ready.reduce((n, r) => n + load(r), 0) + 1;
    const cap = Math.max(
      1,
      Math.ceil(((o.loadFactor ?? DEFAULT_LOAD_FACTOR) * total) / ready.length),
    );
    const key = o.prefixKey;
    const ranked = ready
      .map((r) => ({ r, score: rendezvous(key, r.instance.instance_id) }))
      .sort((a, b) => (a.score < b.score ? 1 : a.score > b.score ? -1 : 0));
    const within = ranked.find((x) => load(x.r) < cap);
    if (within) return within.r;
  }
  const latency = (r: ReadyInstance) => {
    const peer = r.instance.assignments[0]!.peer_key;
    return peer === o.selfPeerKey ? 0 : (o.rttMs(peer) ?? Number.POSITIVE_INFINITY);
  };
  const scored = ready.map((r) => ({ r, load: load(r), rtt: latency(r) }));
  scored.sort(
    (a, b) =>
      a.load - b.load ||
      (a.rtt === b.rtt ? 0 : a.rtt < b.rtt ? -1 : 1) ||
      a.r.instance.created_at - b.r.instance.created_at ||
      a.r.instance.instance_id.localeCompare(b.r.instance.instance_id),
  );
  return scored[0]?.r;
}

/** The rendezvous (highest random weight) score of an instance for a key: 48 bits of sha256. */
function rendezvous(key: string, instanceId: string): number {
  return createHash("sha256").update(key).update("\0").update(instanceId).digest().readUIntBE(0, 6);
}
