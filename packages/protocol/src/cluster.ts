// The replicated control state: members, models, instances, runners and deployments, and the indexed
// events that change it (the commands the master turns into those events: commands.ts). Chat tasks are not in
// it: the master keeps them (packages/state TaskTable); only a lost instance's TaskFailed is replicated.
import { z } from "zod";
import {
  CommandIdSchema,
  InstanceIdSchema,
  ModelIdSchema,
  NodeIdSchema,
  SessionIdSchema,
  TaskIdSchema,
} from "./ids.ts";
import { InstanceKindSchema } from "./instance-kinds.ts";

export const SHARDINGS = ["Pipeline", "Tensor"] as const;
export const ShardingSchema = z.enum(SHARDINGS);
export type Sharding = z.infer<typeof ShardingSchema>;

export const RUNNER_STATES = [
  "RunnerStaging",
  "RunnerWarmingUp",
  "RunnerReady",
  "RunnerFailed",
  "RunnerStopped",
] as const;
export const RunnerStateSchema = z.enum(RUNNER_STATES);
export type RunnerState = z.infer<typeof RunnerStateSchema>;

export const MemberSchema = z.object({
  node_id: NodeIdSchema,
  peer_key: z.string().min(1),
  name: z.string(),
  api_url: z.string(),
  host: z.string(),
  started_at: z.number(),
  joined_at: z.number(),
});
export type Member = z.infer<typeof MemberSchema>;

/** How an embedding instance pools token vectors (llama-server --pooling); mean when unset. */
export const PoolingSchema = z.enum(["mean", "cls", "last"]);
export type Pooling = z.infer<typeof PoolingSchema>;

/**
 * How long an instance loaded on demand stays after its last request (Ollama's `keep_alive`): seconds,
 * or a duration such as "30s", "5m", "1h"; 0 unloads it once its answer is done, -1 never.
 */
export const KeepAliveSchema = z.union([
  z.number().int().min(-1),
  z.string().regex(/^(-1|\d+(ms|s|m|h)?)$/, 'seconds, or a duration such as "30s", "5m", "1h"'),
]);

/** A keep_alive (seconds or a duration) in milliseconds; -1 stays -1 (never unloaded). */
export function keepAliveMs(v: z.infer<typeof KeepAliveSchema>): number {
  if (typeof v === "number") return v < 0 ? -1 : v * 1000;
  if (v === "-1") return -1;
  const m = /^(\d+)(ms|s|m|h)?$/.exec(v)!;
  const n = Number(m[1]);
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] ?? "s"]!;
  return n * unit;
}

/** A keep_alive in milliseconds as records carry it: -1 never unloads, 0 once the answer is done. */
export const KeepAliveMsSchema = z.number().int().min(-1);

/**
 * A model directory's optional `model.json`: its companions (a drafter, an MTP sidecar), the pooling
 * of its embedding instances, the GGUF to load. The worker reads it to describe the model; the store
 * host to pull the companions it names.
 */
export const ModelJsonSchema = z
  .object({
    drafter: ModelIdSchema.optional(),
    mtp_sidecar: ModelIdSchema.optional(),
    pooling: PoolingSchema.optional(),
    /** Loaded on its first request when not placed (docs/capacity.md); overrides chat.on_demand. */
    on_demand: z.boolean().optional(),
    /** How long its on-demand instances stay idle before they are unloaded (chat.keep_alive_ms). */
    keep_alive: KeepAliveSchema.optional(),
    file: z
      .string()
      .regex(/^[^/\\]+\.gguf$/)
      .optional(),
  })
  .strict();

/** A part of a split GGUF: `<stem>-00001-of-00003.gguf` (stem, part, count). */
export const SPLIT_GGUF = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/i;

/** Facts about a registered model, read from its GGUF header by the node that registers it. */
export const ModelRecordSchema = z.object({
  model_id: ModelIdSchema,
  /** GGUF file of the base weights, relative to the model directory. */
  file: z.string().min(1),
  /** Exact bytes of every artifact file (base + split files + local companions). */
  bytes: z.number().int().nonnegative(),
  architecture: z.string(),
  layers: z.number().int().positive(),
  context_length: z.number().int().nonnegative(),
  embedding_length: z.number().int().nonnegative(),
  head_count: z.number().int().nonnegative(),
  head_count_kv: z.number().int().nonnegative(),
  supports_tensor: z.boolean(),
  /** Assistant drafter for speculative decoding (run with -md). */
  drafter: ModelIdSchema.optional(),
  /** Split vision weights file in the model directory (run with --mmproj). */
  mmproj: z.string().optional(),
  /** Its chat template reads `tools`: tool calls work (GET /v1/models says so). */
  tools: z.boolean().optional(),
  /** How an embedding instance pools token vectors (model.json `pooling`; default mean). */
  pooling: PoolingSchema.optional(),
  /** Multi-token-prediction sidecar repository staged with the model. */
  mtp_sidecar: ModelIdSchema.optional(),
  registered_by: NodeIdSchema.optional(),
  /** model.json `on_demand`: loaded on its first request (true) or never (false); absent: chat.on_demand. */
  on_demand: z.boolean().optional(),
  /** model.json `keep_alive`, in ms: how long its on-demand instances stay idle. */
  keep_alive_ms: KeepAliveMsSchema.optional(),
  /** Base URL of the store host serving this model's files (manifest + Range downloads). */
  store_url: z.string().optional(),
});
export type ModelRecord = z.infer<typeof ModelRecordSchema>;

export const AssignmentSchema = z.object({
  node_id: NodeIdSchema,
  peer_key: z.string(),
  rank: z.number().int().nonnegative(),
  /** Pipeline: layers held by this rank. */
  layers: z.number().int().nonnegative().optional(),
  /** Tensor: fraction of every weight matrix held by this rank. */
  fraction: z.number().min(0).max(1).optional(),
  weight_bytes: z.number().nonnegative(),
  required_bytes: z.number().nonnegative(),
});
export type Assignment = z.infer<typeof AssignmentSchema>;

export const InstanceSchema = z.object({
  instance_id: InstanceIdSchema,
  model_id: ModelIdSchema,
  sharding: ShardingSchema,
  /** What it serves (instance-kinds.ts); absent: generate. Read it with kindOf(). */
  kind: InstanceKindSchema.optional(),
  /** Before kinds: `true` for an embedding instance. Read, never written (kindOf). */
  embeddings: z.boolean().optional(),
  /**
   * The context its runner starts with (`-c`), chosen at placement: engine.context_size capped by
   * the model's, or without one the model's own capped by memory. Absent in older records.
   */
  context_size: z.number().int().positive().optional(),
  created_at: z.number(),
  /** Rank 0 first; ranks form the cycle chosen by placement. */
  assignments: z.array(AssignmentSchema).min(1),
});
export type Instance = z.infer<typeof InstanceSchema>;

export const RunnerSchema = z.object({
  instance_id: InstanceIdSchema,
  node_id: NodeIdSchema,
  rank: z.number().int().nonnegative(),
  state: RunnerStateSchema,
  reason: z.string().optional(),
  /** Rank 0: base URL of llama-server. Other ranks: host:port of ggml-rpc-server. */
  endpoint: z.string().optional(),
  restarts: z.number().int().nonnegative().default(0),
  since: z.number(),
  /**
   * The engine's last error line from the runner's log (what llama.cpp said when it exited), kept
   * while it crash-loops or after it failed.
   */
  last_error: z.string().max(400).optional(),
  /** Rank 0 while staging: bytes of the model on local disk so far, reported at most once a second. */
  progress: z
    .object({
      staged_bytes: z.number().int().nonnegative(),
      total_bytes: z.number().int().nonnegative(),
      /** When staging started (the worker's clock, ms). */
      started_at: z.number(),
    })
    .optional(),
  /** While warming up: when the current process start (or wait for remote ranks) began (ms). */
  warmup_started_at: z.number().optional(),
});
export type Runner = z.infer<typeof RunnerSchema>;

/** A chat request the master created a task id for; kept by the master only, never replicated. */
/**
 * An API token's limits (config `auth.tokens[].limits`), enforced cluster-wide by the master on
 * CreateTask (docs/security.md, "Limits per token"). Each is optional; absent means unlimited.
 */
export const TokenLimitsSchema = z
  .object({
    requests_per_minute: z.number().int().positive().optional(),
    /** Prompt plus completion tokens of the requests that ended in the last minute. */
    tokens_per_minute: z.number().int().positive().optional(),
    concurrent_requests: z.number().int().positive().optional(),
  })
  .strict();
export type TokenLimits = z.infer<typeof TokenLimitsSchema>;

export const TaskSchema = z.object({
  task_id: TaskIdSchema,
  command_id: CommandIdSchema,
  model_id: ModelIdSchema,
  instance_id: InstanceIdSchema,
  gateway_node_id: NodeIdSchema,
  created_at: z.number(),
  /** The name of the API token with limits that opened it (absent: no limits apply). */
  token: z.string().max(64).optional(),
});
export type Task = z.infer<typeof TaskSchema>;

/** An instance of a deployment that failed to run on a node: the runner gave up there. */
export const DeploymentFailureSchema = z.object({
  peer_key: z.string(),
  node_name: z.string(),
  instance_id: InstanceIdSchema,
  /** The engine's last error line (the runner's `last_error`), or the runner's reason. */
  error: z.string().max(400),
  at: z.number(),
});
export type DeploymentFailure = z.infer<typeof DeploymentFailureSchema>;

/** Why a deployment has no instance: the placement refusal, as the API would answer it. */
export const DeploymentRefusalSchema = z.object({
  code: z.string(),
  message: z.string(),
  node_id: z.string().optional(),
  health_code: z.string().optional(),
});
export type DeploymentRefusal = z.infer<typeof DeploymentRefusalSchema>;

/**
 * Replicas that follow load (docs/capacity.md): the set grows by one while its requests in flight
 * stay above `up_at` per ready replica, up to `max_replicas`, and shrinks by one after a quiet
 * window, down to `min_replicas`.
 */
export const ScalePolicySchema = z
  .object({
    min_replicas: z.number().int().min(1).max(16),
    max_replicas: z.number().int().min(1).max(16),
    /** Requests in flight per ready replica above which the set grows. */
    up_at: z.number().positive().max(1024),
  })
  .refine((p) => p.min_replicas <= p.max_replicas, {
    message: "min_replicas must not exceed max_replicas",
  });
export type ScalePolicy = z.infer<typeof ScalePolicySchema>;

/**
 * The intent behind a placement: kept in the replicated state until DELETE /instance/{id}; when its
 * instance is lost the master places it again (packages/state reconcile) or keeps it Pending.
 */
export const DeploymentSchema = z.object({
  deployment_id: z.string().min(1),
  model_id: ModelIdSchema,
  min_nodes: z.number().int().positive(),
  sharding: ShardingSchema,
  /** Its instances' kind (see InstanceSchema); absent: generate. */
  kind: InstanceKindSchema.optional(),
  /** Before kinds (see InstanceSchema). */
  embeddings: z.boolean().optional(),
  /**
   * One replica of a placement asked with `replicas` > 1: the deployments of one set keep their
   * instances on distinct nodes (a re-placement avoids the nodes its siblings' instances hold).
   */
  replica_set: z.string().min(1).max(64).optional(),
  /** Its replica set grows and shrinks with load (every deployment of the set carries it). */
  scale: ScalePolicySchema.optional(),
  /**
   * Loaded on demand (a chat request for a model not placed): its instance may be unloaded to make
   * room for another on-demand load while it has no request in flight (docs/capacity.md).
   */
  on_demand: z.literal(true).optional(),
  /**
   * Unloaded (the deployment deleted) after its instance had no request for this long; 0: once its
   * answers are done; absent or -1: never (an operator's placement, unless it asked for one).
   */
  keep_alive_ms: KeepAliveMsSchema.optional(),
  /** Exclusions by peer key: node ids are per session, peer keys survive failover. */
  excluded_peer_keys: z.array(z.string()),
  created_at: z.number(),
  /** The instance that realizes it (its last one while Pending). */
  instance_id: InstanceIdSchema,
  /**
   * Placed: its instance exists. Pending: waiting for a placement that fits. Failing: its instance
   * failed to run (the runner gave up) and the master places it on another node. Failed: it failed
   * on every node tried; the master stops (a new placement of the model, or the model registered
   * anew, tries again).
   */
  status: z.enum(["Placed", "Pending", "Failing", "Failed"]),
  /** Pending: why the last placement attempt was refused; Failed: why it was given up. */
  refusal: DeploymentRefusalSchema.optional(),
  /** Where its instance failed to run, and what the engine said (the last few, newest last). */
  failures: z.array(DeploymentFailureSchema).max(8).optional(),
  /**
   * A replica a scale-down chose, since when (ms): gateways send it no new request while a sibling
   * is ready, and the master deletes it once its requests have ended (docs/capacity.md).
   */
  retiring_since: z.number().optional(),
});
export type Deployment = z.infer<typeof DeploymentSchema>;

export const SessionSchema = z.object({
  session_id: SessionIdSchema,
  master_node_id: NodeIdSchema,
  master_peer_key: z.string(),
  master_started_at: z.number(),
  started_at: z.number(),
});
export type Session = z.infer<typeof SessionSchema>;

export const ControlStateSchema = z.object({
  session: SessionSchema.nullable(),
  index: z.number().int().nonnegative(),
  members: z.record(z.string(), MemberSchema),
  models: z.record(z.string(), ModelRecordSchema),
  instances: z.record(z.string(), InstanceSchema),
  /** Keyed `<instance_id>/<rank>`. */
  runners: z.record(z.string(), RunnerSchema),
  deployments: z.record(z.string(), DeploymentSchema).default({}),
  /**
   * False from a session's start until its master has brought the replica to the intent store
   * (after a full restart the deployments come from there): meanwhile an unknown model may be one
   * not restored yet, so chat answers model_not_ready, not model_not_found.
   */
  intent_restored: z.boolean().default(true),
});
export type ControlState = z.infer<typeof ControlStateSchema>;

// ---- events ----

export const ControlEventSchema = z.discriminatedUnion("type", [
  z.object({
    type: z.literal("SessionStarted"),
    session: SessionSchema,
    /** State carried over from the previous session (members re-identified, dead nodes dropped). */
    members: z.array(MemberSchema),
    models: z.array(ModelRecordSchema),
    instances: z.array(InstanceSchema),
    runners: z.array(RunnerSchema),
    /** Deployments carry over whole: the new master re-places those whose instance did not. */
    deployments: z.array(DeploymentSchema).default([]),
    /** False when the master will restore intent from its store (IntentRestored follows). */
    intent_restored: z.boolean().default(true),
  }),
  /** The master brought the replica to the intent store (see ControlState.intent_restored). */
  z.object({ type: z.literal("IntentRestored") }),
  /**
   * A planned hand-off (the master drains): the named member is the session's master from the
   * next event on. The session, its id and every node id stay; only a lost master changes them.
   */
  z.object({
    type: z.literal("MasterHandedOff"),
    master_node_id: NodeIdSchema,
    master_peer_key: z.string(),
    master_started_at: z.number(),
  }),
  z.object({ type: z.literal("NodeJoined"), member: MemberSchema }),
  z.object({ type: z.literal("NodeLeft"), node_id: NodeIdSchema, reason: z.string() }),
  z.object({ type: z.literal("ModelRegistered"), model: ModelRecordSchema }),
  /** The model left the store: not placeable any more (refused while anything uses it). */
  z.object({ type: z.literal("ModelDeregistered"), model_id: ModelIdSchema }),
  z.object({
    type: z.literal("InstancePlaced"),
    instance: InstanceSchema,
    /** Set when the master re-placed a deployment whose instance was lost. */
    deployment_id: z.string().optional(),
    reason: z.string().optional(),
  }),
  z.object({
    type: z.literal("DeploymentCreated"),
    deployment: DeploymentSchema,
    /** Why, when the master made it (a replica added for load). */
    reason: z.string().optional(),
  }),
  z.object({
    type: z.literal("DeploymentPending"),
    deployment_id: z.string(),
    refusal: DeploymentRefusalSchema,
    reason: z.string(),
  }),
  /** Its instance failed to run (a rank ended RunnerFailed): the master places it elsewhere. */
  z.object({
    type: z.literal("DeploymentFailing"),
    deployment_id: z.string(),
    failure: DeploymentFailureSchema,
  }),
  /** It failed on every node tried: the master stops placing it. */
  z.object({
    type: z.literal("DeploymentFailed"),
    deployment_id: z.string(),
    reason: z.string(),
  }),
  /** A scale-down chose this replica: no new requests; deleted once its requests end. */
  z.object({
    type: z.literal("DeploymentRetiring"),
    deployment_id: z.string(),
    since: z.number(),
    reason: z.string(),
  }),
  /** A retiring replica kept after all: load came back before its requests ended. */
  z.object({
    type: z.literal("DeploymentRecalled"),
    deployment_id: z.string(),
    reason: z.string(),
  }),
  z.object({
    type: z.literal("DeploymentDeleted"),
    deployment_id: z.string(),
    reason: z.string(),
    /**
     * Why, as metrics count it: an operator's request (absent), idle past its keep_alive, or
     * unloaded to make room for an on-demand load.
     */
    cause: z.enum(["idle", "room", "scale_down"]).optional(),
  }),
  z.object({
    type: z.literal("InstanceDeleted"),
    instance_id: InstanceIdSchema,
    reason: z.string(),
  }),
  z.object({ type: z.literal("RunnerStatus"), runner: RunnerSchema }),
  z.object({ type: z.literal("RunnerFailed"), runner: RunnerSchema }),
  /** The master failed an open task whose instance is gone: its gateway ends the request. */
  z.object({ type: z.literal("TaskFailed"), task_id: TaskIdSchema, reason: z.string() }),
  z.object({
    type: z.literal("DownloadFailed"),
    node_id: NodeIdSchema,
    model_id: ModelIdSchema,
    reason: z.string(),
  }),
]);
export type ControlEvent = z.infer<typeof ControlEventSchema>;
export type ControlEventType = ControlEvent["type"];

export const IndexedEventSchema = z.object({
  index: z.number().int().positive(),
  session_id: SessionIdSchema,
  at: z.number(),
  event: ControlEventSchema,
});
export type IndexedEvent = z.infer<typeof IndexedEventSchema>;

export function emptyState(): ControlState {
  return {
    session: null,
    index: 0,
    members: {},
    models: {},
    instances: {},
    runners: {},
    deployments: {},
    intent_restored: true,
  };
}

export function runnerKey(instanceId: string, rank: number): string {
  return `${instanceId}/${rank}`;
}
