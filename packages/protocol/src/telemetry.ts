// The 2-second heartbeat each node publishes: identity, session view, memory, GPUs, disk,
// engine capability, measured links and local runners. Liveness and placement read it.
import { z } from "zod";
import { InstanceIdSchema, ModelIdSchema, SessionIdSchema } from "./ids.ts";
import { RunnerStateSchema } from "./cluster.ts";
import { PullSchema } from "./store.ts";

export const HEALTH_CODES = [
  "gpu_serving_disabled",
  "gpu_detection_degraded",
  "invalid_engine_binary",
  "backend_override_conflict",
  /** Peers refuse this node's cluster secret: it cannot join them. */
  "cluster_secret_rejected",
  /** Someone presented wrong bus credentials to this node (a stranger or a misconfigured node). */
  "bus_auth_failures",
  /** The HTTP API listens beyond loopback with no tokens (auth.allow_anonymous). */
  "anonymous_api",
  /** Bus routes failed their TLS handshake with some peers (a certificate from another CA, or none). */
  "bus_tls_failures",
  /** Every peer fails this node's route TLS handshake: its certificate or CA is not the cluster's. */
  "cluster_tls_rejected",
  /** The node has certificates, but llama-server cannot serve HTTPS: engine traffic is in clear text. */
  "engine_plaintext",
  /** The node listens beyond loopback without TLS (tls.allow_plaintext). */
  "plaintext_network",
  /** A live peer presents a cluster secret this node does not accept (a rotation left unfinished). */
  "cluster_secret_mismatch",
  /** A model directory was removed from store_path by hand while an instance or deployment uses it. */
  "store_model_missing",
  "store_loose_file",
  /**
   * A model in store_path whose files differ from its manifest (a size, or a sha256 a piece-hash
   * backfill read): not served nor registered until its files change (the entry names the file).
   */
  "store_model_changed",
  /** The store host could not register one of its models: the master refused it (its words). */
  "store_model_refused",
  /** Info: the store host hashes a model in the background (registering it, or its piece hashes). */
  "store_hashing",
  /** The master cannot reach a quorum of the intent store: intent cannot change, nor be restored. */
  "intent_store_unavailable",
  /** A runner on this node crashes again and again (its model, instance and the engine's words). */
  "runner_crash_loop",
  /** A runner on this node gave up: its model failed to load or run here. */
  "runner_failed",
] as const;
export const HealthCodeSchema = z.enum(HEALTH_CODES);
export type HealthCode = z.infer<typeof HealthCodeSchema>;

export const HealthEntrySchema = z.object({
  code: HealthCodeSchema,
  /**
   * `error` makes the node no placement candidate (packages/placement cluster.ts); `warn` asks the
   * operator to act; `info` is progress to show (a background hash), never a problem.
   */
  severity: z.enum(["error", "warn", "info"]),
  message: z.string(),
  remediation: z.string(),
  /** What the entry is about, when it is one model's runner. */
  model_id: ModelIdSchema.optional(),
  instance_id: InstanceIdSchema.optional(),
});
export type HealthEntry = z.infer<typeof HealthEntrySchema>;

export const GpuSchema = z.object({
  vendor: z.string(),
  model: z.string(),
  vram_total_bytes: z.number().nonnegative().nullable(),
  vram_free_bytes: z.number().nonnegative().nullable(),
});
export type Gpu = z.infer<typeof GpuSchema>;

/**
 * Which split modes the engine runs across nodes (llama-server over ggml-rpc devices), as its
 * capability probe found (packages/engine capabilities.ts), with the engine's own words.
 */
export const SplitSupportSchema = z.object({
  row_over_rpc: z.boolean(),
  /** llama.cpp's experimental `-sm tensor` mode served the probe over rpc devices. */
  tensor_over_rpc: z.boolean(),
  /**
   * The node's operator allows that experimental mode for Tensor across nodes
   * (`engine.experimental_tensor_split`); off by default.
   */
  tensor_opt_in: z.boolean().default(false),
  evidence: z.string(),
});
export type SplitSupport = z.infer<typeof SplitSupportSchema>;

/**
 * Whether the engine build moves a conversation's KV cache between servers: a slot saved to a file
 * on one llama-server, restored into another's and reused there (packages/engine slot-probe.ts),
 * with the engine's own counts as evidence.
 */
export const SlotRestoreSchema = z.object({
  supported: z.boolean(),
  evidence: z.string(),
});
export type SlotRestore = z.infer<typeof SlotRestoreSchema>;

export const EngineInfoSchema = z.object({
  server_bin: z.string().nullable(),
  rpc_bin: z.string().nullable(),
  /** Backend the engine build serves with. */
  backend: z.enum(["cpu", "cuda", "metal", "unknown"]),
  usable: z.boolean(),
  problem: z.string().optional(),
  overridden: z.boolean(),
  /** What the capability probe found; absent until it ran (or from an older node). */
  split: SplitSupportSchema.optional(),
  /** What the slot-restore probe found; absent until it ran (or from an older node). */
  slot_restore: SlotRestoreSchema.optional(),
});
export type EngineInfo = z.infer<typeof EngineInfoSchema>;

export const TelemetrySchema = z.object({
  memory_total_bytes: z.number().nonnegative(),
  /** Memory available to a new runner (RAM, or VRAM where the engine serves on GPU). */
  memory_free_bytes: z.number().nonnegative(),
  gpus: z.array(GpuSchema),
  disk_free_bytes: z.number().nonnegative().nullable(),
  engine: EngineInfoSchema,
  declared_backend: z.enum(["auto", "cpu", "cuda", "metal"]),
});
export type Telemetry = z.infer<typeof TelemetrySchema>;

export const LinkSchema = z.object({ peer_key: z.string(), rtt_ms: z.number().nonnegative() });
export type Link = z.infer<typeof LinkSchema>;

export const LocalRunnerSchema = z.object({
  instance_id: InstanceIdSchema,
  rank: z.number().int().nonnegative(),
  state: RunnerStateSchema,
  endpoint: z.string().optional(),
});

/** A process's event-loop delay over one heartbeat period (its LoopMonitor), and the worst since start. */
export const LoopDelaySchema = z.object({
  p99_ms: z.number().nonnegative(),
  max_ms: z.number().nonnegative(),
  max_ever_ms: z.number().nonnegative(),
});
export const HeartbeatSchema = z.object({
  peer_key: z.string().min(1),
  name: z.string(),
  host: z.string(),
  api_url: z.string(),
  started_at: z.number(),
  session_id: SessionIdSchema.nullable(),
  master_peer_key: z.string().nullable(),
  is_master: z.boolean(),
  last_index: z.number().int().nonnegative(),
  /**
   * The API key of the sender's engines (made at its start, random): gateways present it to the
   * llama-server of an instance whose rank 0 runs there. Bus members only; never in an API answer.
   */
  engine_key: z.string().min(16).max(128).optional(),
  /**
   * Which cluster secret the sender presents: an HMAC of its peer key under a key derived from the
   * secret. Receivers check it against their secret and the other one of an open rotation window
   * and report `cluster_secret_mismatch` when neither matches (it proves nothing else).
   */
  secret_proof: z.string().min(16).max(64).optional(),
  /** Null until the first telemetry reading completes (placement then reports info_pending). */
  telemetry: TelemetrySchema.nullable(),
  /**
   * The sender's measured links. Left out while they have not changed since the sender last sent
   * them (services/cluster/src/link-report.ts): receivers keep the last ones they got from the same
   * process. Sent in full on a change, when the sender hears a new peer, and every few heartbeats.
   */
  links: z.array(LinkSchema).optional(),
  runners: z.array(LocalRunnerSchema),
  health: z.array(HealthEntrySchema),
  /** The sender's event-loop delay since its previous heartbeat (absent from older senders). */
  loop_delay: LoopDelaySchema.optional(),
  /** The store host's model pulls while it has any (live or finished within the hour). */
  pulls: z.array(PullSchema).optional(),
  /**
   * Chat requests this node's gateway has in flight, per instance (absent when none): gateways add
   * them up to balance load, since tasks are not replicated.
   */
  outstanding: z.record(InstanceIdSchema, z.number().int().nonnegative()).optional(),
  /**
   * The node is draining (SIGTERM, POST /admin/drain): gateways send no new request to an instance
   * with a rank on it; it leaves once the requests in flight there have ended.
   */
  draining: z.literal(true).optional(),
  sent_at: z.number(),
});
/** A heartbeat as it travels: `links` may be left out. */
export type HeartbeatMessage = z.infer<typeof HeartbeatSchema>;
/** A heartbeat as nodes keep it: with the sender's last links filled in. */
export type Heartbeat = Omit<HeartbeatMessage, "links"> & { links: Link[] };
