// The commands the master turns into the events of cluster.ts (the master's own and those a gateway,
// worker or store host sends it), their replies, and the sync a follower pages the event log with.
import { z } from "zod";
import {
  CommandIdSchema,
  InstanceIdSchema,
  ModelIdSchema,
  NodeIdSchema,
  SessionIdSchema,
  TaskIdSchema,
} from "./ids.ts";
import { WireErrorSchema } from "./errors.ts";
import { InstanceKindSchema } from "./instance-kinds.ts";
import {
  ControlEventSchema,
  IndexedEventSchema,
  InstanceSchema,
  KeepAliveMsSchema,
  ModelRecordSchema,
  RunnerSchema,
  ScalePolicySchema,
  ShardingSchema,
  TokenLimitsSchema,
} from "./cluster.ts";

/** A task a gateway finished: its id and the tokens it used (counted against tokens_per_minute). */
export const FinishedTaskSchema = z.object({
  task_id: TaskIdSchema,
  /** Prompt plus completion tokens the request used (counted against tokens_per_minute). */
  tokens: z.number().int().nonnegative().optional(),
});
export type FinishedTask = z.infer<typeof FinishedTaskSchema>;

/** Most finished tasks one CreateTask carries (a bound on the message: about 60 bytes each). */
export const MAX_FINISHED_PER_COMMAND = 256;

export const CommandSchema = z.discriminatedUnion("type", [
  z.object({
    type: z.literal("PlaceInstance"),
    instance: InstanceSchema,
    /** The request behind it, kept as a deployment (absent: no intent is kept). */
    deployment: z
      .object({
        min_nodes: z.number().int().positive(),
        sharding: ShardingSchema,
        excluded_nodes: z.array(z.string()),
        kind: InstanceKindSchema.optional(),
        /** Before kinds (see InstanceSchema). */
        embeddings: z.boolean().optional(),
        replica_set: z.string().min(1).max(64).optional(),
        /** Unloaded after this long without a request (absent: never). */
        keep_alive_ms: KeepAliveMsSchema.optional(),
        /** Its replica set follows load (with replica_set). */
        scale: ScalePolicySchema.optional(),
      })
      .optional(),
  }),
  /**
   * A chat request for a registered model with no instance, on demand: the master places it (once,
   * however many gateways ask), unloading least recently used idle on-demand instances when it does
   * not fit, or refuses with the placement's typed error.
   */
  z.object({
    type: z.literal("LoadModel"),
    model_id: ModelIdSchema,
    kind: InstanceKindSchema.optional(),
    keep_alive_ms: KeepAliveMsSchema,
    /** Decided and answered with its events, nothing sequenced (what the previews show). */
    dry_run: z.boolean().optional(),
  }),
  z.object({ type: z.literal("DeleteInstance"), instance_id: InstanceIdSchema }),
  /**
   * The master's own: one replica more or less for a set that follows load, with the reason. Down
   * retires one replica, then (sent again once its requests ended) deletes it; up recalls a retiring
   * replica before it places a new one.
   */
  z.object({
    type: z.literal("ScaleReplicas"),
    replica_set: z.string().min(1).max(64),
    direction: z.enum(["up", "down"]),
    reason: z.string().max(400),
  }),
  /**
   * The master's own: an instance idle past its deployment's keep_alive leaves with its deployment
   * (refused when a request began on it meanwhile).
   */
  z.object({
    type: z.literal("UnloadInstance"),
    instance_id: InstanceIdSchema,
    reason: z.string().max(400),
  }),
  z.object({ type: z.literal("RegisterModel"), model: ModelRecordSchema }),
  z.object({ type: z.literal("DeregisterModel"), model_id: ModelIdSchema }),
  z.object({ type: z.literal("ReportRunner"), runner: RunnerSchema }),
  z.object({
    type: z.literal("CreateTask"),
    command_id: CommandIdSchema,
    model_id: ModelIdSchema,
    instance_id: InstanceIdSchema,
    /** A token with limits: the master admits the task against them or refuses rate_limited. */
    token: z.object({ name: z.string().min(1).max(64), limits: TokenLimitsSchema }).optional(),
    /**
     * Tasks the sending gateway finished since its last command, reported here instead of one
     * FinishTask command each (one bus round per request, not two). The master ends them before
     * it decides this task, and also when it refuses it.
     */
    finished: z.array(FinishedTaskSchema).max(MAX_FINISHED_PER_COMMAND).optional(),
  }),
  z.object({ type: z.literal("FinishTask"), ...FinishedTaskSchema.shape }),
  z.object({ type: z.literal("FailTask"), task_id: TaskIdSchema, reason: z.string() }),
  z.object({
    type: z.literal("ReportDownloadFailed"),
    model_id: ModelIdSchema,
    reason: z.string(),
  }),
]);
export type Command = z.infer<typeof CommandSchema>;

export const CommandRequestSchema = z.object({
  session_id: SessionIdSchema,
  from_node_id: NodeIdSchema,
  command: CommandSchema,
});
export type CommandRequest = z.infer<typeof CommandRequestSchema>;

export const CommandReplySchema = z.discriminatedUnion("ok", [
  z.object({
    ok: z.literal(true),
    index: z.number().int().nonnegative(),
    task_id: TaskIdSchema.optional(),
    /** A dry run's decision: the events it would sequence (none were). */
    events: z.array(ControlEventSchema).optional(),
  }),
  z.object({ ok: z.literal(false), error: WireErrorSchema }),
]);
export type CommandReply = z.infer<typeof CommandReplySchema>;

/**
 * Catch-up from the master, one bounded page per request (docs/architecture.md, "Replica sync"):
 * the follower asks from the index after its own; a snapshot too large for one message comes in
 * parts, each asked for by the snapshot's index and the part's number.
 */
export const SyncRequestSchema = z.object({
  session_id: SessionIdSchema,
  from_index: z.number().int().positive(),
  /** Continues a snapshot transfer: the snapshot (by its index) and the part wanted next. */
  snapshot: z
    .object({ index: z.number().int().nonnegative(), part: z.number().int().nonnegative() })
    .optional(),
});
export type SyncRequest = z.infer<typeof SyncRequestSchema>;

/** One part of the master's state serialized as JSON text; the parts joined parse as ControlState. */
export const SnapshotPartSchema = z.object({
  /** The state's index: the follower continues with the events after it. */
  index: z.number().int().nonnegative(),
  part: z.number().int().nonnegative(),
  parts: z.number().int().positive(),
  data: z.string(),
});
export type SnapshotPart = z.infer<typeof SnapshotPartSchema>;

export const SyncReplySchema = z.discriminatedUnion("ok", [
  z.object({
    ok: z.literal(true),
    /** Consecutive events from `from_index`, as many as fit the master's page budget. */
    events: z.array(IndexedEventSchema),
    /** The master's index when it answered: the follower asks again while it is behind. */
    last_index: z.number().int().nonnegative(),
    /** Instead of events: a part of a snapshot (the gap was compacted away, or is too long to page). */
    snapshot_part: SnapshotPartSchema.optional(),
  }),
  z.object({ ok: z.literal(false), error: WireErrorSchema }),
]);
export type SyncReply = z.infer<typeof SyncReplySchema>;
