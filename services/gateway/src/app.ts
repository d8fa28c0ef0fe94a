// The gateway's part of a node's API (a component, mounted on the node's app with the others'):
// the inference endpoints, /v1/models, placement, the cluster state and the /admin actions.
// createGatewayApp serves it alone on a node app (its tests, and tools that need only it).
import type { Hono } from "hono";
import type { Logger } from "@ic/log";
import { createNodeApp, routesOf } from "@ic/http";
import type { AuthOptions, Component } from "@ic/http";
import type { ClusterView, ModelRecord } from "@ic/protocol";
import { onDemand } from "./chat/on-demand.ts";
import { DEFAULT_CHAT_LIMITS } from "./chat/request.ts";
import { chatRoutes } from "./routes/chat.ts";
import { modelRoutes } from "./routes/models.ts";
import type { ChatOptions } from "./routes/chat.ts";
import { clusterRoutes } from "./routes/cluster.ts";
import { placementRoutes } from "./routes/placement.ts";
import { RequestLoad } from "./request-load.ts";
import { ConfigSchema } from "@ic/config";
import { PromptCacheMap } from "./prompt-cache.ts";
import { kvMoveMetrics, promptCacheMetrics } from "./metrics.ts";
import { KvMoveStats } from "./chat/handover.ts";
import type { KvMovePort } from "./chat/handover.ts";

/** The cluster section's defaults, read from the schema that defines them (config's `cluster`). */
const CLUSTER_DEFAULTS = ConfigSchema.shape.cluster.parse({});

export interface GatewayOptions {
  readonly cluster: ClusterView;
  readonly log: Logger;
  readonly name: string;
  readonly now?: () => number;
  readonly restart?: () => void;
  /** POST /admin/drain: drain and stop this node. */
  readonly drain?: () => void;
  /** Per-request observer of the chat path (tracing, metrics). */
  readonly observeChat?: ChatOptions["observe"];
  /** How long POST /place_instance waits for topology and memory (`cluster.info_pending_wait_ms`). */
  readonly infoPendingWaitMs?: number;
  /** Runner context size, for the KV-cache part of the memory model. */
  readonly contextSize?: number;
  /** Bearer tokens; absent or empty: anonymous (a loopback node, or auth.allow_anonymous). */
  readonly auth?: AuthOptions;
  /** Headers for the engine of an instance (its API key). */
  readonly engineHeaders?: ChatOptions["engineHeaders"];
  /** Chat bounds: default max_tokens and the engine timeouts (config `chat`). */
  readonly chat?: ChatOptions["chat"];
  /** Each chat stream migration's outcome and duration (metrics). */
  readonly onChatMigration?: ChatOptions["onMigration"];
  /** The cluster's resumable streams (the node fills it from the bus); absent: this gateway's own. */
  readonly streams?: ChatOptions["streams"];
  /** GET /state/stream sends a document at least this often (default `cluster.heartbeat_ms`). */
  readonly stateStreamPeriodMs?: number;
  /** This gateway's requests in flight, shared with the node's heartbeat (`outstanding`). */
  readonly load?: RequestLoad;
  /** What each instance's prompt cache holds (prefix_routing `cache`); absent: one of its own. */
  readonly promptCache?: PromptCacheMap;
  /** How nodes are asked to save and restore slots (chat.kv_move); absent: caches never move. */
  readonly kvMove?: KvMovePort;
  /** The cache moves' counts (the node's warm hand-off counts its moves here too); absent: its own. */
  readonly kvStats?: KvMoveStats;
}

/** The gateway on a node app of its own (its tests serve it so). */
export function createGatewayApp(o: GatewayOptions): Hono {
  return createNodeApp({ auth: o.auth, log: o.log.child({ component: "gateway" }) }, [
    gatewayComponent(o),
  ]);
}

/** The gateway as one of a node's components: its routes, the prompt-cache map's and the cache moves' metrics. */
export function gatewayComponent(o: GatewayOptions): Component {
  const promptCache = o.promptCache ?? new PromptCacheMap();
  const kvStats = o.kvStats ?? new KvMoveStats();
  return {
    name: "gateway",
    routes: () => routesOf((app) => gatewayRoutes(app, { ...o, promptCache }, kvStats)),
    metrics: (registry) => {
      promptCacheMetrics(registry, promptCache);
      kvMoveMetrics(registry, kvStats);
    },
  };
}

function gatewayRoutes(app: Hono, o: GatewayOptions, kvStats: KvMoveStats): void {
  const log = o.log.child({ component: "gateway" });
  const load = o.load ?? new RequestLoad();
  clusterRoutes(app, {
    cluster: o.cluster,
    name: o.name,
    now: o.now ?? Date.now,
    restart: o.restart ?? (() => log.warn("restart requested but not supported by this launcher")),
    drain: o.drain ?? (() => log.warn("drain requested but not supported by this launcher")),
    load,
    streamPeriodMs: o.stateStreamPeriodMs ?? CLUSTER_DEFAULTS.heartbeat_ms,
  });
  const loads = (m: ModelRecord) => onDemand(m, { ...DEFAULT_CHAT_LIMITS, ...o.chat });
  placementRoutes(app, {
    onDemand: loads,
    cluster: o.cluster,
    log,
    infoPendingWaitMs: o.infoPendingWaitMs ?? CLUSTER_DEFAULTS.info_pending_wait_ms,
    now: o.now ?? Date.now,
    ...(o.contextSize ? { memory: { contextSize: o.contextSize } } : {}),
  });
  modelRoutes(app, {
    cluster: o.cluster,
    onDemand: loads,
  });
  chatRoutes(app, {
    cluster: o.cluster,
    log,
    ...(o.observeChat ? { observe: o.observeChat } : {}),
    ...(o.engineHeaders ? { engineHeaders: o.engineHeaders } : {}),
    chat: o.chat,
    load,
    ...(o.onChatMigration ? { onMigration: o.onChatMigration } : {}),
    ...(o.streams ? { streams: o.streams } : {}),
    ...(o.promptCache ? { promptCache: o.promptCache } : {}),
    ...(o.kvMove ? { kvMove: o.kvMove } : {}),
    kvStats,
  });
}
