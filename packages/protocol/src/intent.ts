// The operator's intent as the cluster keeps it durably (NATS JetStream key-value, replicated on up to
// three nodes): deployments and registered models. What runs, and its status, is not intent: the
// master derives it again after any restart.
import type { z } from "zod";
import { DeploymentSchema } from "./cluster.ts";
import type { Deployment, ModelRecord } from "./cluster.ts";
import type { ModelId } from "./ids.ts";

/** A deployment as the operator asked for it (no instance, no status). */
export const DeploymentIntentSchema = DeploymentSchema.pick({
  deployment_id: true,
  model_id: true,
  min_nodes: true,
  sharding: true,
  excluded_peer_keys: true,
  created_at: true,
  kind: true,
  embeddings: true,
  replica_set: true,
  scale: true,
  on_demand: true,
  keep_alive_ms: true,
});
export type DeploymentIntent = z.infer<typeof DeploymentIntentSchema>;

/** Everything the intent store holds. */
export interface Intent {
  readonly deployments: readonly DeploymentIntent[];
  readonly models: readonly ModelRecord[];
  /** False until the store was first written: an older cluster's state is then copied into it. */
  readonly initialized: boolean;
}

/** One change to the intent store. */
export type IntentWrite =
  | { readonly op: "put_deployment"; readonly deployment: DeploymentIntent }
  | { readonly op: "delete_deployment"; readonly deployment_id: string }
  | { readonly op: "put_model"; readonly model: ModelRecord }
  | { readonly op: "delete_model"; readonly model_id: ModelId };

export function deploymentIntent(d: Deployment | DeploymentIntent): DeploymentIntent {
  return {
    deployment_id: d.deployment_id,
    model_id: d.model_id,
    min_nodes: d.min_nodes,
    sharding: d.sharding,
    excluded_peer_keys: d.excluded_peer_keys,
    created_at: d.created_at,
    // What it serves, its replica set and its on-demand policy come back with it after a restart.
    ...(d.kind !== undefined ? { kind: d.kind } : {}),
    ...(d.embeddings !== undefined ? { embeddings: d.embeddings } : {}),
    ...(d.replica_set !== undefined ? { replica_set: d.replica_set } : {}),
    ...(d.scale !== undefined ? { scale: d.scale } : {}),
    ...(d.on_demand !== undefined ? { on_demand: d.on_demand } : {}),
    ...(d.keep_alive_ms !== undefined ? { keep_alive_ms: d.keep_alive_ms } : {}),
  };
}

/**
 * Where intent is kept: every write is acknowledged by a quorum of the store's replicas before it
 * returns; with no quorum reachable it fails with `no_quorum` (retryable).
 */
export interface IntentStore {
  load(): Promise<Intent>;
  apply(writes: readonly IntentWrite[]): Promise<void>;
}
