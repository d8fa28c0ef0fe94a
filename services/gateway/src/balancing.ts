// Picks which ready instance of a model serves a request: fewest outstanding requests, then the lowest
// link latency from this node (a local rank 0 counts as 0), then the oldest. Pure, so tables test it.
import type { ReadyInstance } from "./readiness.ts";

export interface BalanceInput {
  readonly outstanding: ReadonlyMap<string, number>;
  /** This node's peer key: an instance whose rank 0 runs here has latency 0. */
  readonly selfPeerKey: string;
  /** Measured round trip from this node to a peer (heartbeat links); undefined when unknown. */
  readonly rttMs: (peerKey: string) => number | undefined;
}

/** The instance to send the next request to; undefined only for an empty list. */
export function chooseInstance(
  ready: readonly ReadyInstance[],
  o: BalanceInput,
): ReadyInstance | undefined {
  const latency = (r: ReadyInstance) => {
    const peer = r.instance.assignments[0]!.peer_key;
    return peer === o.selfPeerKey ? 0 : (o.rttMs(peer) ?? Number.POSITIVE_INFINITY);
  };
  const scored = ready.map((r) => ({
    r,
    load: o.outstanding.get(r.instance.instance_id) ?? 0,
    rtt: latency(r),
  }));
  scored.sort(
    (a, b) =>
      a.load - b.load ||
      (a.rtt === b.rtt ? 0 : a.rtt < b.rtt ? -1 : 1) ||
      a.r.instance.created_at - b.r.instance.created_at ||
      a.r.instance.instance_id.localeCompare(b.r.instance.instance_id),
  );
  return scored[0]?.r;
}
