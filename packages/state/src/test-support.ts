// Test-only fixtures shared by this package's table tests: a model record, a replica with a session
// and members, and node reports (heartbeat telemetry) with a given memory. Not exported by index.ts.
import { emptyState } from "@ic/protocol";
import type {
  ControlState,
  Instance,
  InstanceId,
  ModelId,
  ModelRecord,
  NodeId,
  SessionId,
} from "@ic/protocol";
import type { NodeReport } from "@ic/placement";

export const G = 1e9;
/** A memory model without overheads: a share needs exactly its weight bytes. */
export const BARE = { overheadFactor: 1, runnerBytes: 0, kvBytesPerElement: 0 };

/** A 6 GB, 10-layer model that supports Tensor sharding. */
export const model: ModelRecord = {
  model_id: "org/m" as ModelId,
  file: "m.gguf",
  bytes: 6 * G,
  architecture: "llama",
  layers: 10,
  context_length: 0,
  embedding_length: 64,
  head_count: 4,
  head_count_kv: 4,
  supports_tensor: true,
};

/** Session s-1 mastered by n-a, members `n-<id>` (peer keys `p-<id>`), `model` registered. */
export function replicaWith(memberIds: readonly string[]): ControlState {
  const s = emptyState();
  s.session = {
    session_id: "s-1" as SessionId,
    master_node_id: "n-a" as NodeId,
    master_peer_key: "p-a",
    master_started_at: 0,
    started_at: 0,
  };
  for (const id of memberIds) {
    s.members[`n-${id}`] = {
      node_id: `n-${id}` as NodeId,
      peer_key: `p-${id}`,
      name: `node-${id}`,
      api_url: "",
      host: "",
      started_at: 0,
      joined_at: 0,
    };
  }
  s.models[model.model_id] = model;
  return s;
}

/** The heartbeat view of node `p-<id>`: `gb` GB total and free, its engine usable or not. */
export function report(
  id: string,
  gb = 10,
  o: { usable?: boolean; links?: readonly string[] } = {},
): NodeReport {
  return {
    peer_key: `p-${id}`,
    telemetry: {
      memory_total_bytes: gb * G,
      memory_free_bytes: gb * G,
      gpus: [],
      disk_free_bytes: null,
      engine: {
        server_bin: "/e",
        rpc_bin: null,
        backend: "cpu",
        usable: o.usable ?? true,
        overridden: false,
      },
      declared_backend: "auto",
    },
    health: [],
    links: (o.links ?? []).map((other) => ({ peer_key: `p-${other}`, rtt_ms: 1 })),
  };
}

/** An instance of `model` wholly on one node: 6 GB required. */
export const instanceOn = (id: string, node = "b", model_id = model.model_id): Instance => ({
  instance_id: id as InstanceId,
  model_id,
  sharding: "Pipeline",
  created_at: 0,
  assignments: [
    {
      node_id: `n-${node}` as NodeId,
      peer_key: `p-${node}`,
      rank: 0,
      layers: 10,
      weight_bytes: 6 * G,
      required_bytes: 6 * G,
    },
  ],
});
