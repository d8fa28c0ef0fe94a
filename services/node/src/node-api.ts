// The node's HTTP API: one neutral app (createNodeApp: the error envelope, tokens and scopes) with
// every component's routes mounted in the order they are matched, the gateway first with its
// settings from the config. buildNode serves it; fuzz.test.ts serves the same composition over a
// scripted cluster.
import type { Registry } from "prom-client";
import type { Hono } from "hono";
import type { Config } from "@ic/config";
import { gatewayComponent } from "@ic/gateway";
import type {
  KvMovePort,
  KvMoveStats,
  PromptCacheMap,
  RequestLoad,
  StreamDirectory,
} from "@ic/gateway";
import { createNodeApp, routesOf } from "@ic/http";
import type { ApiToken, Component, TokenSet } from "@ic/http";
import type { Logger } from "@ic/log";
import type { ChatObserver, ChatRequestSeen, ClusterView } from "@ic/protocol";
import type { NodeHooks } from "./build-node.ts";
import type { ObservabilityComponent } from "./observability/component.ts";
import { openApiRoutes } from "./openapi.ts";

/** The routed components, by name (absent: a node without that part, e.g. no store host). */
export interface NodeRoutes {
  readonly events: Component;
  /** GET /v1/diagnostics/telemetry. */
  readonly telemetry: Component;
  readonly reload?: Component | undefined;
  readonly observability: ObservabilityComponent;
  readonly tracing: Component & {
    readonly tracing: { observe(r: ChatRequestSeen): ChatObserver | undefined };
  };
  readonly store: Component;
  /** The peer watch and GET /health. */
  readonly cluster: Component;
  readonly dashboard: Component;
  readonly storeHost?: Component | undefined;
  /** GET /kv/files/{file}: saved KV caches on their way to another node (@ic/worker kv-move.ts). */
  readonly kvMove?: Component | undefined;
}

export interface NodeApiOptions {
  readonly cluster: ClusterView;
  readonly log: Logger;
  readonly hooks: NodeHooks;
  /** The API's tokens: a set a reload replaces, or a fixed list (empty: anonymous). */
  readonly tokens: TokenSet | readonly ApiToken[];
  readonly engineHeaders?: (instanceId: string) => Record<string, string>;
  /** Chat requests in flight through this gateway (heartbeats tell the others). */
  readonly load?: RequestLoad;
  /** The cluster's resumable streams (absent: this gateway's own only). */
  readonly streams?: StreamDirectory;
  /** What each instance's prompt cache holds (absent: this gateway's own knowledge only). */
  readonly promptCache?: PromptCacheMap;
  /** How the gateway asks nodes to save and restore slots (absent: caches never move). */
  readonly kvMove?: KvMovePort;
  readonly kvStats?: KvMoveStats;
  readonly routes: NodeRoutes;
  /**
   * The node's metrics registry: the gateway, made here rather than started on the node's
   * component stack, declares its metrics in it (the routed components declare theirs when started).
   */
  readonly registry?: Registry;
}

export function nodeApi(cfg: Config, o: NodeApiOptions): Hono {
  const r = o.routes;
  const routed: readonly (Component | undefined)[] = [
    r.events,
    r.telemetry,
    r.reload,
    r.observability,
    r.tracing,
    r.store,
    r.cluster,
    { name: "openapi", routes: () => routesOf(openApiRoutes) },
    r.dashboard,
    r.storeHost,
    r.kvMove,
  ];
  const observers = [r.tracing.tracing.observe, r.observability.observe];
  const gateway = gatewayComponent({
    cluster: o.cluster,
    log: o.log,
    name: cfg.node.name!,
    restart: () => o.hooks.onRestartRequested?.(),
    drain: () => o.hooks.onDrainRequested?.(),
    infoPendingWaitMs: cfg.cluster.info_pending_wait_ms,
    stateStreamPeriodMs: cfg.cluster.heartbeat_ms,
    contextSize: cfg.engine.context_size,
    chat: cfg.chat,
    onChatMigration: (m) => r.observability.nodeMetrics.migration(m),
    ...(o.engineHeaders ? { engineHeaders: o.engineHeaders } : {}),
    ...(o.load ? { load: o.load } : {}),
    ...(o.streams ? { streams: o.streams } : {}),
    ...(o.promptCache ? { promptCache: o.promptCache } : {}),
    ...(o.kvMove ? { kvMove: o.kvMove } : {}),
    ...(o.kvStats ? { kvStats: o.kvStats } : {}),
    observeChat: (req) => combineObservers(observers.map((f) => f(req))),
  });
  if (o.registry) gateway.metrics?.(o.registry);
  // With tokens configured, peers present the cluster's node token (read scope: store downloads).
  // The set is replaced on a reload (SIGHUP, POST /admin/reload).
  return createNodeApp({ auth: { tokens: o.tokens }, log: o.log }, [gateway, ...routed]);
}

/** One observer for several (undefined when none observes: the chat path then skips its events). */
function combineObservers(list: (ChatObserver | undefined)[]): ChatObserver | undefined {
  const live = list.filter((x): x is ChatObserver => x !== undefined);
  if (live.length === 0) return undefined;
  if (live.length === 1) return live[0];
  return { event: (e) => live.forEach((o) => o.event(e)) };
}
