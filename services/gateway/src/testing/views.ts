// Small views of the cluster for the routing tables' tests: a ready instance spread over peers, and
// a live peer as its heartbeat shows it (draining or not, its engine moving KV caches or not).
import type { Instance, PeerView, SlotRestore } from "@ic/protocol";
import type { ReadyInstance } from "../readiness.ts";

/** A ready instance with one rank per peer key, rank 0 first. */
export function readyInstance(id: string, peers: readonly string[]): ReadyInstance {
  return {
    endpoint: `http://${id}`,
    instance: {
      instance_id: id,
      assignments: peers.map((p, rank) => ({ rank, peer_key: p, node_id: `n-${p}` })),
    } as unknown as Instance,
  };
}

/** A live peer: draining or not; `moves`: what its engine's slot-restore probe said (absent: none). */
export function livePeer(key: string, o: { draining?: boolean; moves?: boolean } = {}): PeerView {
  const slot_restore: SlotRestore | undefined =
    o.moves === undefined ? undefined : { supported: o.moves, evidence: "test" };
  return {
    heartbeat: {
      peer_key: key,
      draining: o.draining ?? false,
      telemetry: { engine: { slot_restore } },
    } as unknown as PeerView["heartbeat"],
    lastHeard: 0,
  };
}
