// The API key an instance's engine answers to. Every node makes a key at its start and tells it to
// the other members in its heartbeats; an instance's engines start with its rank-0 node's key.
import type { ClusterView, PeerView } from "@ic/protocol";

/** Request headers for an instance's llama-server (empty when its rank-0 node's key is unknown). */
export function engineAuth(
  cluster: Pick<ClusterView, "snapshot"> & { peer(peerKey: string): PeerView | undefined },
  self: { readonly peerKey: string; readonly engineKey: string },
): (instanceId: string) => Record<string, string> {
  const headers = new Map<string, Record<string, string>>();
  return (instanceId) => {
    const rank0 = cluster.snapshot().instances[instanceId]?.assignments.find((a) => a.rank === 0);
    const key =
      rank0 === undefined
        ? undefined
        : rank0.peer_key === self.peerKey
          ? self.engineKey
          : cluster.peer(rank0.peer_key)?.heartbeat.engine_key;
    if (key === undefined) return {};
    let h = headers.get(key);
    if (!h) {
      if (headers.size >= 1024) headers.clear();
      h = Object.freeze({ authorization: `Bearer ${key}` });
      headers.set(key, h);
    }
    return h;
  };
}
