// GET /state: the replica of the control state plus this node's live view (heartbeats, health).
// `node_identities` and `nodeHealth` are spelled as the spec fixes them.
import { z } from "zod";
import {
  DeploymentSchema,
  ScalePolicySchema,
  InstanceSchema,
  ModelRecordSchema,
  RunnerSchema,
  SessionSchema,
} from "./cluster.ts";
import { HealthEntrySchema, LoopDelaySchema, TelemetrySchema } from "./telemetry.ts";
import { NodeIdSchema } from "./ids.ts";
import { PullSchema } from "./store.ts";

export const NodeIdentitySchema = z.object({
  node_id: NodeIdSchema,
  name: z.string(),
  api_url: z.string(),
  host: z.string(),
  is_master: z.boolean(),
  started_at: z.number(),
  joined_at: z.number(),
});

export const StateDocumentSchema = z.object({
  session: SessionSchema.nullable(),
  /** Index of the last control event applied to this replica. */
  index: z.number().int().nonnegative(),
  /** False until the session's master has restored the replica from the intent store. */
  intent_restored: z.boolean(),
  this_node: z.object({
    node_id: NodeIdSchema.nullable(),
    name: z.string(),
    is_master: z.boolean(),
    synced: z.boolean(),
    /** Chat requests through this node's gateway whose task the master has created, still open. */
    tasks_open: z.number().int().nonnegative(),
  }),
  node_identities: z.array(NodeIdentitySchema),
  nodeHealth: z.array(HealthEntrySchema.extend({ node_id: NodeIdSchema, node_name: z.string() })),
  topology: z.object({
    nodes: z.array(
      z.object({
        node_id: NodeIdSchema,
        name: z.string(),
        last_heard_ms_ago: z.number().nonnegative(),
        telemetry: TelemetrySchema.nullable(),
        /** Its event-loop delay from its last heartbeat; null before the first or from an older node. */
        loop_delay: LoopDelaySchema.nullable(),
      }),
    ),
    links: z.array(z.object({ from: NodeIdSchema, to: NodeIdSchema, rtt_ms: z.number() })),
  }),
  models: z.array(ModelRecordSchema),
  instances: z.array(
    InstanceSchema.extend({
      runners: z.array(RunnerSchema),
      /** Chat requests in flight on it, over every gateway (their heartbeats; this node's live). */
      outstanding: z.number().int().nonnegative(),
    }),
  ),
  /** Placement intents: Placed, or Pending with the typed refusal of the last attempt. */
  deployments: z.array(DeploymentSchema),
  /**
   * Replica sets (placements with replicas, or that follow load: docs/capacity.md): how many
   * replicas they keep now (`target`, one deployment each), how many serve (`ready`, a retiring one
   * included), how many retire (a scale-down's, deleted once its requests end), the requests in
   * flight on them, and their scale policy.
   */
  replica_sets: z
    .array(
      z.object({
        replica_set: z.string(),
        model_id: z.string(),
        scale: ScalePolicySchema.optional(),
        target: z.number().int().nonnegative(),
        ready: z.number().int().nonnegative(),
        retiring: z.number().int().nonnegative().default(0),
        outstanding: z.number().int().nonnegative(),
      }),
    )
    .default([]),
  /** Model pulls of the store host (POST /store/pulls), from its last heartbeat. */
  pulls: z.array(PullSchema),
});
export type StateDocument = z.infer<typeof StateDocumentSchema>;

/**
 * GET /state's query: `links=0` leaves out `topology.links` (n(n-1) entries, most of the document
 * on a large cluster) for callers that poll and do not need them. Other keys are ignored, as on
 * every GET of this API.
 */
export const StateQuerySchema = z.object({ links: z.enum(["0", "1"]).default("1") });
