// The configuration document: every key of the spec's table plus the node, bus and engine settings.
// Defaults follow the spec; every time and size limit is configurable so tests can use small values.
import { z } from "zod";
import { TokenLimitsSchema } from "@ic/protocol";
import type { TokenLimits } from "@ic/protocol";

/**
 * The largest staging size accepted, in GiB (1 PiB). Sizes become byte counts, which must stay exact
 * integers (below 2^53) in storage reports; no volume comes near this.
 */
export const MAX_STAGING_GB = 1024 ** 2;
const gib = () => z.number().min(0).max(MAX_STAGING_GB, `at most ${MAX_STAGING_GB} GiB`);

export const StagingSchema = z
  .object({
    cleanup_on_deactivate: z.boolean().default(true),
    staging_keep_recent_gb: gib().default(40),
    /** Free space that must remain after a transfer (spec: 10 GiB). */
    headroom_gb: gib().default(10),
  })
  .strict();

/** A node override names only the keys it changes; absent keys fall back to the base section. */
export const StagingOverrideSchema = z
  .object({
    cleanup_on_deactivate: z.boolean().optional(),
    staging_keep_recent_gb: gib().optional(),
    headroom_gb: gib().optional(),
  })
  .strict();

export const API_SCOPES = ["admin", "read", "inference"] as const;
export type ApiScope = (typeof API_SCOPES)[number];

export const ApiTokenSchema = z
  .object({
    /** Who holds the token (shown in logs, never the token itself). */
    name: z.string().min(1).max(64),
    token: z.string().min(16, "at least 16 characters").optional(),
    /** File holding the token (mode 0600); read at load time. */
    token_file: z.string().min(1).optional(),
    scopes: z.array(z.enum(API_SCOPES)).min(1),
    /**
     * Models an inference token may use, as glob patterns over the model id (`*` any characters,
     * `/` included; `?` one). Absent: every model. Others answer 403 naming these patterns.
     */
    models: z.array(z.string().min(1).max(256)).min(1).max(64).optional(),
    /** Requests and tokens per minute and concurrent requests, held cluster-wide (docs/security.md). */
    limits: TokenLimitsSchema.optional(),
  })
  .strict()
  .refine((t) => (t.token === undefined) !== (t.token_file === undefined), {
    message: "set exactly one of token and token_file",
  });

/** The `engine` section: how this node runs llama.cpp (a new engine flag is a key here and its
 * argument in services/worker/src/args.ts). */
/**
 * The `chat` section: the bounds of one request through a gateway, taken whole by the gateway (its
 * `ChatLimits`), so this is the one place for their defaults.
 */
export const ChatSchema = z
  .object({
    /** max_tokens given to requests that set neither max_tokens nor max_completion_tokens. */
    default_max_tokens: z.number().int().positive().default(2048),
    /** A new connection to an engine that is not up within this long fails (504, retryable). */
    connect_timeout_ms: z.number().int().positive().default(5000),
    /**
     * Longest silence between two chunks of a stream (llama-server pings every 30 s while it
     * works, so the default leaves room for one missed ping).
     */
    idle_timeout_ms: z.number().int().positive().default(75_000),
    /** Longest a request may take from start to end, queueing and generation included. */
    total_timeout_ms: z.number().int().positive().default(900_000),
    /**
     * A chat stream whose instance is lost after it sent tokens continues on another ready
     * instance of the model (docs/api.md, "Stream migration"); a request's `x-ic-migrate: 1`
     * or `0` overrides this.
     */
    migrate_streams: z.boolean().default(false),
    /**
     * A migrating stream takes its KV cache along where both engines' probes found they can move
     * one (docs/api.md, "Stream migration"): the target then prefills only what the cache lacks. And
     * a stream on a draining node moves, with its cache, once the model is ready elsewhere.
     */
    kv_move: z.boolean().default(true),
    /** Longest one cache move (save, fetch, restore) may take; past it the stream re-prefills. */
    kv_move_timeout_ms: z.number().int().positive().default(10_000),
    /** Bytes of caches this gateway moves off one draining node; past it streams re-prefill. */
    kv_move_drain_budget_bytes: z
      .number()
      .int()
      .positive()
      .default(32 * 1024 ** 3),
    /**
     * With several ready instances of a model, which one a request goes to while its load stays
     * within 1.25 times the mean or the mean plus 2. `cache`: the one whose prompt cache holds the
     * longest part of its prompt less half a prompt per request in flight there, as the gateways
     * learned it from what they sent (shared on the bus) and the engines' reuse counts (ties as
     * `hash`); `hash`: the first in a ranking by the hash of the conversation's
     * leading messages, the same on every gateway; `off`: fewest outstanding requests. `true` is
     * `cache`, `false` is `off`.
     */
    prefix_routing: z
      .union([z.boolean(), z.enum(["cache", "hash", "off"])])
      .default("cache")
      .transform((v) => (v === true ? "cache" : v === false ? "off" : v)),
    /**
     * A stream whose client sent its own `X-Conversation-Id` keeps generating this long after the
     * client's connection drops, for the client to read the rest through any node (GET
     * /v1/stream); then, unless it was read again, it is cancelled. Streams with an id the
     * gateway made are cancelled when their client leaves (0: those with the client's id too).
     */
    resume_grace_ms: z.number().int().min(0).default(30_000),
    /**
     * Images given as http(s) URLs are fetched by the gateway (at most 10 MiB, within 10 s, only
     * `image/*`) and sent to the engine inline; off, such a request is refused (400) and the client
     * sends the image as a data: URL. Engines never fetch URLs themselves.
     */
    fetch_image_urls: z.boolean().default(false),
    /** With fetch_image_urls: the only hosts images are fetched from (`*.example.com` too); empty: any. */
    image_url_hosts: z.array(z.string().min(1).max(253)).max(256).default([]),
    /**
     * A request for a registered model with no instance loads it (docs/capacity.md) instead of
     * answering 404: the master places it, unloading least recently used idle on-demand instances
     * for room. A model's model.json `on_demand` overrides this. Set it alike on every node.
     */
    on_demand: z.boolean().default(false),
    /** How long a request waits for the model it loads on demand to become ready. */
    load_wait_ms: z.number().int().positive().default(120_000),
    /**
     * How long an instance loaded on demand stays after its last request (Ollama's keep_alive):
     * 0 unloads it once its answers are done, -1 never. A model's model.json `keep_alive` overrides it.
     */
    keep_alive_ms: z.number().int().min(-1).default(300_000),
  })
  .strict();

export const EngineSchema = z
  .object({
    server_bin: z.string().optional(),
    rpc_bin: z.string().optional(),
    warmup_deadline_seconds: z.number().positive().default(300),
    /**
     * `-c` of every runner. Unset: each instance gets its model's trained context, halved while
     * it does not fit the nodes' memory (down to 4096); set: this, capped by the model's.
     */
    context_size: z.number().int().positive().optional(),
    /** Layers offloaded to the GPU; the runner always passes an explicit -ngl. */
    gpu_layers: z.number().int().min(0).default(999),
    /** First port runners use; 0 picks free ports. */
    port_base: z.number().int().min(0).max(65535).default(0),
    restart_backoff_ms: z.number().int().min(0).default(1000),
    /**
     * CPU niceness of engine processes: under contention the node's heartbeats and request
     * routing are scheduled before engine threads (0 disables).
     */
    niceness: z.number().int().min(0).max(19).default(10),
    healthy_uptime_ms: z.number().int().min(0).default(60000),
    /**
     * CPU threads of each engine process (`-t` of llama-server and ggml-rpc-server). Unset: the
     * engine's own choice (as many as the machine has cores). Several engines on one machine each
     * take every core by default; set it to share the cores between them.
     */
    threads: z.number().int().min(1).max(1024).optional(),
    extra_args: z.array(z.string()).default([]),
    /**
     * Allows Tensor sharding across nodes through llama.cpp's experimental `-sm tensor` mode where
     * the engine's probe found it working (this build cannot split rows over rpc). Off by default:
     * on an H200 it did not serve a 30 MB F16 model across two ranks.
     */
    experimental_tensor_split: z.boolean().default(false),
    /**
     * Where each runner's stdout/stderr is written (`<instance>-rank<n>.log`); saved KV caches on
     * their way between nodes are under its `kv/<instance>/`.
     */
    runner_log_dir: z.string().min(1).default("~/.service/runners"),
    /** The largest saved KV cache (slot file) this node fetches from another to restore. */
    kv_move_max_bytes: z
      .number()
      .int()
      .positive()
      .default(16 * 1024 ** 3),
  })
  .strict()
  .prefault({});

const HostPort = z.string().regex(/^[A-Za-z0-9.\-_[\]:]+:\d{1,5}$/, "expected host:port");

export const ConfigSchema = z
  .object({
    node: z
      .object({
        /** Display name; defaults to the hostname. */
        name: z.string().min(1).max(64).optional(),
        /** Advertised address: what other nodes and clients use to reach this node (IP or name). */
        host: z.string().min(1).default("127.0.0.1"),
        /** Address the HTTP API and the bus route port listen on; defaults to `host`. */
        bind: z.string().min(1).optional(),
        api_port: z.number().int().min(0).max(65535).default(8080),
        /** Declared backend for the engine; `auto` observes the hardware. */
        backend: z.enum(["auto", "cpu", "cuda", "metal"]).default("auto"),
        /** Caps the memory this node offers to placement (GiB); unset offers all free memory. */
        memory_limit_gb: z.number().positive().optional(),
        /**
         * On SIGTERM or POST /admin/drain: how long the node waits for the requests in flight on its
         * engines to end (gateways route around it meanwhile) before it stops anyway.
         */
        drain_timeout_ms: z.number().int().min(0).default(60_000),
      })
      .strict()
      .prefault({}),
    bus: z
      .object({
        /** Client port of the embedded nats-server; 0 picks a free one. */
        client_port: z.number().int().min(0).max(65535).default(4222),
        /** Where the client port listens: only this node's own services connect, so loopback. */
        client_bind: z.string().min(1).default("127.0.0.1"),
        /** Route port other nodes' nats-servers connect to. */
        cluster_port: z.number().int().min(0).max(65535).default(6222),
        cluster_name: z.string().min(1).default("inference-cluster"),
        /** Overrides the nats-server binary (else `NATS_SERVER_BIN` or PATH). */
        server_bin: z.string().optional(),
        /**
         * JetStream's files: the intent store (deployments, registered models), replicated on up to
         * three nodes. Keep it on a persistent volume: it is what brings the models back after every
         * node was stopped.
         */
        store_dir: z.string().min(1).default("~/.service/jetstream"),
      })
      .strict()
      .prefault({}),
    cluster: z
      .object({
        /** Seed list of peers' route addresses (host:cluster_port). */
        peers: z.array(HostPort).default([]),
        /**
         * Shared cluster secret: bus clients and routes authenticate with keys derived from it.
         * Required once the node has peers; prefer `secret_file` (mode 0600) or SERVICE_CLUSTER_SECRET.
         */
        secret: z.string().min(16, "at least 16 characters").optional(),
        secret_file: z.string().min(1).optional(),
        /**
         * A second cluster secret, accepted but never presented, while the secret is rotated
         * (docs/security.md): first the new one here, then the old one once `secret` is the new one;
         * the operator ends the window by removing it. Needs TLS (routes authenticate by certificate).
         */
        rotation_secret: z.string().min(16, "at least 16 characters").optional(),
        rotation_secret_file: z.string().min(1).optional(),
        heartbeat_ms: z.number().int().min(50).default(2000),
        /** A node silent this long is removed from the session. */
        liveness_timeout_ms: z.number().int().min(100).default(4000),
        /** DEFAULT_ELECTION_TIMEOUT: master silence before a new election; also the formation wait. */
        election_timeout_ms: z.number().int().min(100).default(3000),
        /** How long POST /place_instance waits for topology and memory info (spec: 15 s). */
        info_pending_wait_ms: z.number().int().min(0).default(15000),
        /** A replica set that follows load grows after its load stayed above its threshold this long. */
        scale_up_window_ms: z.number().int().min(0).default(10_000),
        /** ... and shrinks after it was quiet this long (and as long since its last change). */
        scale_down_window_ms: z.number().int().min(0).default(60_000),
      })
      .strict()
      .prefault({}),
    auth: z
      .object({
        /** Bearer tokens for the HTTP API, each with its scopes. */
        tokens: z
          .array(ApiTokenSchema)
          .refine((ts) => new Set(ts.map((t) => t.name)).size === ts.length, {
            message: "token names must be unique (limits are counted per name)",
          })
          .default([]),
        /** Lets a node that listens beyond loopback start without tokens (nodeHealth warns). */
        allow_anonymous: z.boolean().default(false),
      })
      .strict()
      .prefault({}),
    tls: z
      .object({
        /** The cluster CA (PEM): peers' routes, peers' APIs and engines must show a certificate it signed. */
        ca_file: z.string().min(1).optional(),
        /** This node's certificate (PEM), signed by the cluster CA and valid for `node.host`. */
        cert_file: z.string().min(1).optional(),
        /** Its private key (PEM, mode 0600). */
        key_file: z.string().min(1).optional(),
        /**
         * Lets a node that listens beyond loopback run without certificates: bus routes, API calls and
         * engine traffic then cross the network in clear text (nodeHealth warns).
         */
        allow_plaintext: z.boolean().default(false),
      })
      .strict()
      .prefault({}),
    node_cache_path: z.string().min(1).default("~/.service/staging"),
    store_path: z.string().min(1).optional(),
    model_store: z
      .object({
        staging: StagingSchema.prefault({}),
        /** URL of the store host; when absent, a node with store_path serves itself. */
        url: z.string().url().optional(),
        /** Model hub base URL: where the store host's pulls download from (HF_TOKEN is sent). */
        hub_url: z.string().url().default("https://huggingface.co"),
        /**
         * Lets a node download a model from hub_url itself when the store host is unreachable
         * (into hub_cache_path). Off by default: a node then waits for its store host.
         */
        hub_fallback: z.boolean().default(false),
        /** Where direct hub downloads land (checked for space on its own filesystem). */
        hub_cache_path: z.string().min(1).default("~/.service/hub-cache"),
        /**
         * A model download (store to node, hub to store) that receives no byte for this long fails
         * and is retried, resuming from what arrived (a stalled connection never ends by itself).
         */
        transfer_idle_timeout_ms: z.number().int().min(100).default(30_000),
      })
      .strict()
      .prefault({}),
    node_overrides: z
      .record(
        z.string(),
        z
          .object({ model_store: z.object({ staging: StagingOverrideSchema }).strict().optional() })
          .strict(),
      )
      .default({}),
    logging: z
      .object({
        enabled: z.boolean().default(true),
        level: z.enum(["fatal", "error", "warn", "info", "debug", "trace"]).default("info"),
        ingest_url: z.string().url().optional(),
      })
      .strict()
      .prefault({}),
    chat: ChatSchema.prefault({}),
    tracing: z
      .object({
        enabled: z.boolean().default(false),
        retention_days: z.number().int().min(0).default(3),
        dir: z.string().min(1).default("~/.service/traces"),
      })
      .strict()
      .prefault({}),
    dashboard: z
      .object({
        /** How often the dashboard's charts take a sample (they keep the last hour). */
        sample_interval_ms: z.number().int().min(100).max(600_000).default(10_000),
      })
      .strict()
      .prefault({}),
    event_log: z
      .object({
        dir: z.string().min(1).default("~/.service/events"),
        compact_above_mb: z.number().positive().default(256),
        keep_events: z.number().int().positive().default(20000),
        archive_total_mb: z.number().positive().default(1024),
        free_floor_gb: z.number().min(0).default(2),
        check_every: z.number().int().positive().default(1024),
        write_delay_ms: z.number().int().min(0).max(10_000).default(50),
      })
      .strict()
      .prefault({}),
    engine: EngineSchema,
  })
  .strict();

export type ConfigInput = z.input<typeof ConfigSchema>;
type Parsed = z.output<typeof ConfigSchema>;
/** A token as the node uses it: the secret read from `token` or `token_file`. */
export interface ResolvedToken {
  readonly name: string;
  readonly token: string;
  readonly scopes: readonly ApiScope[];
  readonly models?: readonly string[];
  readonly limits?: TokenLimits;
}
/** The node's TLS material as loaded: absolute paths and the PEM text of each file. */
export interface ResolvedTls {
  readonly ca_file: string;
  readonly cert_file: string;
  readonly key_file: string;
  readonly ca: string;
  readonly cert: string;
  readonly key: string;
}
/**
 * The loaded configuration: bind address, cluster secret, tokens and TLS files are resolved by the
 * loader (`tls` is null when the node runs without certificates).
 */
export type Config = Omit<Parsed, "node" | "cluster" | "auth" | "tls"> & {
  node: Parsed["node"] & { bind: string };
  cluster: Parsed["cluster"] & {
    secret: string;
    rotation_secret: string | undefined;
    /** No secret was configured (a lone node): each load makes another, so a reload keeps its own. */
    secret_generated: boolean;
  };
  auth: { tokens: ResolvedToken[]; allow_anonymous: boolean };
  tls: ResolvedTls | null;
};
export type StagingConfig = z.output<typeof StagingSchema>;
