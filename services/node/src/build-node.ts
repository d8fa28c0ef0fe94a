// buildNode: one node's components, built from their config sections, started in order and wired
// into the API. It is the one place that says what a node is made of; node.ts adds the process
// around it (the nats-server, the listening socket, drain and stop); the API's composition is
// node-api.ts, which fuzz.test.ts also serves over a scripted cluster.
import { randomBytes } from "node:crypto";
import type { Hono } from "hono";
import type { Bus } from "@ic/bus";
import type { ClusterAgent, HeartbeatExtras } from "@ic/cluster";
import type { ClusterSecret, Config, ResolvedTls } from "@ic/config";
import { stagingFor } from "@ic/config";
import { dashboardComponent } from "@ic/dashboard";
import { eventLogComponent } from "@ic/eventlog";
import {
  engineAuth,
  handOffWarm,
  KvMoveStats,
  PromptCacheMap,
  RequestLoad,
  StreamDirectory,
} from "@ic/gateway";
import type { KvMovePort, WarmHandOffResult } from "@ic/gateway";
import { ComponentStack, routesOf, TokenSet } from "@ic/http";
import type { Component } from "@ic/http";
import { processLogTail } from "@ic/log";
import type { Logger } from "@ic/log";
import type { ClusterView, PeerApis, PeerView } from "@ic/protocol";
import { LiveStagingSettings, stagingSettings } from "@ic/staging";
import { createHubSource, storeComponent, storeHostComponent } from "@ic/store";
import { tracingComponent } from "@ic/tracing";
import { engineComponent, kvMoveComponent, telemetryComponent, workerComponent } from "@ic/worker";
import type { Worker } from "@ic/worker";
import type { ClusterPort } from "@ic/worker";
import { healthRoutes } from "./health-route.ts";
import type { NodePhase } from "./health-route.ts";
import { LoopMonitor } from "./loop-monitor.ts";
import { observabilityComponent } from "./observability/component.ts";
import { nodeApi } from "./node-api.ts";
import { PeerWatch, watchRoutes } from "./peer-watch.ts";
import type { WatchAgent } from "./peer-watch.ts";
import { ConfigReloader, reloadRoutes, withNodeToken } from "./reload.ts";
import type { SecurityHealth } from "./security-health.ts";
import { StoreStager } from "./store-stager.ts";

/** What the components ask of the cluster agent (node.ts passes its ClusterAgent). */
export type NodeCluster = ClusterView &
  ClusterPort &
  WatchAgent &
  Pick<ClusterAgent, "peer" | "openTasks"> &
  Partial<Pick<ClusterAgent, "start" | "stop">>;

/** What the process around a node hands it. */
export interface NodeHooks {
  /** The config file the node was loaded from (expanded): the settings editor writes to it. */
  readonly configFile?: string;
  /** Called when POST /admin/restart asks for a fresh process image. */
  readonly onRestartRequested?: () => void;
  /** POST /admin/drain: the process drains and stops (as on SIGTERM). */
  readonly onDrainRequested?: () => void;
  /** Unhandled rejections the process guard logged (for /metrics). */
  readonly unhandledRejections?: () => number;
}

export interface NodeDeps<C extends NodeCluster> {
  /** The node's logger (its name bound). */
  readonly log: Logger;
  readonly peerKey: string;
  readonly startedAt: number;
  /** This node's bus connection. */
  readonly bus: Pick<
    Bus,
    "respond" | "request" | "requestMany" | "subscribe" | "publish" | "sendStats"
  >;
  /** The agent, given what this node adds to each heartbeat (built before it starts). */
  readonly cluster: (extras: () => HeartbeatExtras) => C;
  /** The API's base URL: the API listens before the node is built (heartbeats advertise it). */
  readonly apiUrl: string;
  /** The address engines listen on (node.host resolved). */
  readonly engineHost: string;
  readonly secret: ClusterSecret;
  readonly security: SecurityHealth;
  readonly phase: () => NodePhase;
  readonly draining: () => boolean;
  readonly hooks?: NodeHooks;
  /** Renewed certificates for the API's new connections (a reload). */
  readonly applyTls?: (next: ResolvedTls) => void;
}

export interface BuiltNode<C extends NodeCluster> {
  readonly app: Hono;
  readonly cluster: C;
  /** The components started, in order: stop() stops them last first. */
  readonly stack: ComponentStack;
  /** Chat requests this node's gateway has in flight (a drain waits for them). */
  readonly chatLoad: RequestLoad;
  readonly engineHeaders: (instanceId: string) => Record<string, string>;
  readonly reloader: ConfigReloader;
  readonly stager: StoreStager;
  /** Cache moves this node is the source of, still to be fetched (a drain waits for them). */
  readonly kvPending: () => number;
  /** A drain's last step: the warm conversations' caches go to the replicas taking them. */
  readonly warmHandOff: (deadline: number) => Promise<WarmHandOffResult>;
}

/**
 * Builds and starts the components of one node onto `stack` (the node's process parts may already be
 * on it). On a failure what the stack holds is stopped before it throws.
 */
export async function buildNode<C extends NodeCluster>(
  cfg: Config,
  deps: NodeDeps<C>,
  stack = new ComponentStack(deps.log),
): Promise<BuiltNode<C>> {
  try {
    return await compose(cfg, deps, stack);
  } catch (e) {
    await stack.stop();
    throw e;
  }
}

/** What every phase of the composition reads. */
interface Scope<C extends NodeCluster> {
  readonly cfg: Config;
  readonly deps: NodeDeps<C>;
  readonly stack: ComponentStack;
  readonly name: string;
  /** The key this node's engines start with (told to the members in heartbeats). */
  readonly engineKey: string;
  /** Live peers other than this node that advertise an API. */
  readonly otherPeers: () => PeerView[];
  /** Their APIs, for the cluster-wide views (traces, storage, series), asked with the node token. */
  readonly peers: PeerApis;
}

async function compose<C extends NodeCluster>(
  cfg: Config,
  deps: NodeDeps<C>,
  stack: ComponentStack,
): Promise<BuiltNode<C>> {
  const { log, peerKey, secret, hooks = {} } = deps;
  // The agent is built before the components that use it start; it starts after the API is wired.
  let cluster: C | undefined;
  const otherPeers = () =>
    (cluster?.livePeers() ?? []).filter(
      (p) => p.heartbeat.peer_key !== peerKey && p.heartbeat.api_url,
    );
  const scope: Scope<C> = {
    cfg,
    deps,
    stack,
    name: cfg.node.name!,
    // Random at each start; not derived from the cluster secret (rotating it leaves engines reachable).
    engineKey: `ice_${randomBytes(24).toString("base64url")}`,
    otherPeers,
    peers: {
      token: () => secret.token(),
      list: () =>
        otherPeers().map((p) => ({ name: p.heartbeat.name, apiUrl: p.heartbeat.api_url })),
    },
  };
  const local = await startLocal(scope);
  cluster = deps.cluster(() => ({ telemetry: null, links: [], runners: [], ...stack.heartbeat() }));
  const agent = cluster;
  const storage = await startStorage(scope, agent);
  const engineHeaders = engineAuth(agent, { peerKey, engineKey: scope.engineKey });
  const apiTokens = new TokenSet(withNodeToken(cfg.auth.tokens, secret.acceptedTokens()));
  const reloader = reloaderFor(scope, apiTokens);
  let worker: Worker | undefined;
  const services = await startServices(
    scope,
    agent,
    { ...local, ...storage, engineHeaders },
    () => worker,
  );
  const clusterPart = clusterComponent(scope, agent);
  const { streams, promptCache, kv } = gatewayShared(deps.bus);
  const app = nodeApi(cfg, {
    cluster: agent,
    log,
    hooks,
    tokens: apiTokens,
    engineHeaders,
    streams,
    promptCache,
    kvMove: kv.port,
    kvStats: kv.stats,
    load: local.chatLoad,
    registry: services.observability.nodeMetrics.registry,
    routes: {
      events: local.events,
      telemetry: local.telemetryPart,
      reload: { name: "reload", routes: () => routesOf((a) => reloadRoutes(a, reloader)) },
      ...services,
      cluster: clusterPart,
      storeHost: storage.storeHost,
    },
  });
  agent.on({ event: (ev) => local.events.eventLog.append(ev) });
  await stack.start(clusterPart);
  worker = await startWorker(scope, agent, local, storage.stager);
  // Every component started: each declares its own metrics in the node's registry.
  stack.declareMetrics(services.observability.nodeMetrics.registry);
  return {
    app,
    cluster: agent,
    stack,
    chatLoad: local.chatLoad,
    engineHeaders,
    reloader,
    stager: storage.stager,
    kvPending: () => services.kvMove.moves.pending(),
    warmHandOff: (deadline) =>
      handOffWarm({ cluster: agent, cache: promptCache, limits: cfg.chat, log, ...kv }, deadline),
  };
}

/**
 * The parts that need no cluster: the event log, the engine and its probes, telemetry, the event
 * loop's delay, and this node's own heartbeat fields (load, draining, engine key, secret proof,
 * security findings).
 */
async function startLocal<C extends NodeCluster>(scope: Scope<C>) {
  const { cfg, deps, stack } = scope;
  const { log, peerKey, secret } = deps;
  const events = await stack.start(eventLogComponent(cfg.event_log, { log }));
  const engine = await stack.start(
    engineComponent(cfg.engine, {
      log,
      tls: cfg.tls ? { certFile: cfg.tls.cert_file, keyFile: cfg.tls.key_file } : undefined,
      onTlsProbe: (r) => deps.security.engineTls(r),
    }),
  );
  const telemetryPart = await stack.start(
    telemetryComponent(cfg.node, {
      log,
      engine: () => engine.info(),
      modelsPath: cfg.node_cache_path,
      heartbeatMs: cfg.cluster.heartbeat_ms,
      bus: deps.bus,
      peerKey,
      name: scope.name,
      peers: () =>
        scope.otherPeers().map((p) => ({
          peer_key: p.heartbeat.peer_key,
          api_url: p.heartbeat.api_url,
        })),
    }),
  );
  const telemetry = telemetryPart.collector;
  const loop = new LoopMonitor();
  await stack.start({
    name: "loop-monitor",
    start: () => loop.start(),
    stop: () => loop.stop(),
    heartbeat: () => ({ loop_delay: loop.sample() }),
  });
  // This node's chat requests in flight: the gateway balances on it, heartbeats tell the others.
  const chatLoad = new RequestLoad();
  await stack.start({
    name: "node",
    heartbeat: () => {
      const outstanding = chatLoad.heartbeatPart();
      const heard = scope.otherPeers();
      const foreign = heard
        .filter(({ heartbeat: h }) => h.secret_proof && !secret.accepts(h.peer_key, h.secret_proof))
        .map((p) => p.heartbeat.name)
        .sort();
      return {
        ...(outstanding ? { outstanding } : {}),
        ...(deps.draining() ? { draining: true as const } : {}),
        engine_key: scope.engineKey,
        secret_proof: secret.proof(peerKey),
        health: deps.security.entries(heard.length, foreign),
      };
    },
  });
  return { events, engine, telemetry, telemetryPart, chatLoad };
}

/** What the gateway shares with the other gateways over the bus, and with the node's drain. */
function gatewayShared(bus: NodeDeps<NodeCluster>["bus"]) {
  // The cluster's resumable streams: each gateway's own, and the others' from the bus.
  const streams = new StreamDirectory((n) => bus.publish("streams", n));
  bus.subscribe("streams", (n) => streams.receive(n), { ignoreOwn: true });
  // What each engine's prompt cache holds: this gateway's prompts, and the others' from the bus.
  const promptCache = new PromptCacheMap({ publish: (n) => bus.publish("prompts", n) });
  bus.subscribe("prompts", (n) => promptCache.receive(n), { ignoreOwn: true });
  const kv = { port: kvMovePort(bus), stats: new KvMoveStats() };
  return { streams, promptCache, kv };
}

/**
 * Caches move with migrating streams and, on a drain, with the warm conversations: slots are saved
 * and restored by the nodes that hold them (worker kv-move.ts), asked on the bus.
 */
function kvMovePort(bus: Pick<Bus, "request">): KvMovePort {
  return {
    save: (peer, req) =>
      bus.request("kvSave", req, { suffix: peer, timeoutMs: req.timeout_ms + 1000 }),
    restore: (peer, req) =>
      bus.request("kvRestore", req, { suffix: peer, timeoutMs: req.timeout_ms + 1000 }),
  };
}

/** The store host (with store_path) and this node's staging of model copies. */
async function startStorage<C extends NodeCluster>(scope: Scope<C>, agent: C) {
  const { cfg, deps, stack, name } = scope;
  const { log, secret } = deps;
  // The staging section in force on this node (its override applied); the settings editor replaces it.
  const settings = new LiveStagingSettings(stagingSettings(stagingFor(cfg, name)));
  const storeHost = cfg.store_path
    ? await stack.start(
        storeHostComponent({
          storePath: cfg.store_path,
          modelStore: cfg.model_store,
          settings,
          cluster: agent,
          bus: deps.bus,
          self: { name, apiUrl: deps.apiUrl },
          hubToken: process.env.HF_TOKEN,
          log,
        }),
      )
    : undefined;
  // Staging: startup reconciliation of orphaned copies runs before any runner starts.
  const hubUrl = cfg.model_store.hub_fallback ? cfg.model_store.hub_url : undefined;
  const stager = new StoreStager({
    root: cfg.node_cache_path,
    settings,
    log,
    cluster: agent,
    storeLocalPath: cfg.store_path,
    storeToken: () => secret.token(),
    transferIdleTimeoutMs: cfg.model_store.transfer_idle_timeout_ms,
    // Staging from peers: every live node serves the pieces of its copies it verified.
    peers: () => scope.peers.list().map((p) => ({ name: p.name, url: p.apiUrl })),
    nodeName: name,
    hub: hubUrl
      ? {
          source: createHubSource({ hubUrl, accessToken: process.env.HF_TOKEN }),
          modelCachePath: cfg.model_store.hub_cache_path,
        }
      : undefined,
  });
  await stack.start({ name: "staging", start: () => stager.start(), stop: () => stager.stop() });
  return { settings, storeHost, stager };
}

/** Tracing, observability, the store's routes and purges, the dashboard. */
async function startServices<C extends NodeCluster>(
  scope: Scope<C>,
  agent: C,
  parts: Awaited<ReturnType<typeof startLocal>> &
    Awaited<ReturnType<typeof startStorage>> & {
      readonly engineHeaders: (instanceId: string) => Record<string, string>;
    },
  worker: () => Worker | undefined,
) {
  const { cfg, deps, stack, name, peers } = scope;
  const { log, bus, peerKey, hooks = {} } = deps;
  const { stager, settings } = parts;
  const eventLog = parts.events.eventLog;
  const tracing = await stack.start(tracingComponent(cfg.tracing, { log, node: name, peers }));
  const observability = await stack.start(
    observabilityComponent(cfg.dashboard, {
      bus,
      sources: {
        name,
        peerKey,
        cluster: agent,
        log: log.child({ component: "metrics" }),
        runners: () => worker()?.runners() ?? [],
        engineHeaders: parts.engineHeaders,
        bus: () => bus.sendStats,
        openTasks: () => agent.openTasks(),
        unhandledRejections: hooks.unhandledRejections ?? (() => 0),
      },
      runnerLogs: {
        runnerLogDir: cfg.engine.runner_log_dir,
        logFileOf: (id, rank) => worker()?.supervisorFor(id, rank)?.spec.logFile,
      },
      peers,
      logTail: processLogTail(),
    }),
  );
  const store = await stack.start(
    storeComponent({
      peers,
      bus,
      cluster: agent,
      stager,
      eventLog,
      nodeCachePath: cfg.node_cache_path,
      settings,
      name,
      log,
    }),
  );
  // Moving KV caches between nodes, this node's engines' side (its routes and bus requests).
  const kvMove = await stack.start(
    kvMoveComponent({
      bus,
      peerKey,
      engine: (id) => worker()?.kvEngine(id),
      engineHeaders: { authorization: `Bearer ${scope.engineKey}` },
      apiUrl: deps.apiUrl,
      token: cfg.auth.tokens.length === 0 ? undefined : () => deps.secret.token(),
      maxBytes: cfg.engine.kv_move_max_bytes,
      extraArgs: cfg.engine.extra_args,
      log,
    }),
  );
  const dashboard = dashboardComponent({
    log,
    file: hooks.configFile,
    nodeName: name,
    live: settings,
  });
  return { tracing, observability, store, dashboard, kvMove };
}

/**
 * The cluster agent as a component, with the fast failure signal: a watch connection to the master
 * (peer-watch.ts). It closes after the agent stops, so a master probing this node on the drop finds
 * nothing answering: a graceful stop is noticed as fast as a kill.
 */
function clusterComponent<C extends NodeCluster>(scope: Scope<C>, agent: C): Component {
  const { cfg, deps, name } = scope;
  const { log, secret } = deps;
  const peerWatch = new PeerWatch({
    agent,
    log,
    self: { peerKey: deps.peerKey, startedAt: deps.startedAt },
    token: cfg.auth.tokens.length === 0 ? undefined : () => secret.token(),
  });
  return {
    name: "cluster",
    start: () => {
      agent.start?.();
      peerWatch.start();
    },
    stop: async () => {
      await agent.stop?.();
      peerWatch.stop();
    },
    routes: () =>
      routesOf((a) => {
        watchRoutes(a, { agent, log });
        healthRoutes(a, { agent, name, phase: deps.phase });
      }),
  };
}

/** Reloads (SIGHUP, POST /admin/reload): the API's tokens, the cluster secret, renewed certificates. */
function reloaderFor<C extends NodeCluster>(scope: Scope<C>, apiTokens: TokenSet): ConfigReloader {
  const { cfg, deps } = scope;
  const { log, secret, hooks = {} } = deps;
  return new ConfigReloader({
    file: hooks.configFile,
    set: apiTokens,
    initial: cfg.auth.tokens,
    secret,
    // Renewed certificates: the API's new connections and this process's clients. nats-server
    // keeps its route certificate until the node restarts (node.ts).
    tls: { initial: cfg.tls, apply: (next) => deps.applyTls?.(next) },
    name: scope.name,
    log,
  });
}

/** The worker: the runners of the instances assigned to this node (it starts last). */
async function startWorker<C extends NodeCluster>(
  scope: Scope<C>,
  agent: C,
  local: Awaited<ReturnType<typeof startLocal>>,
  stager: StoreStager,
): Promise<Worker> {
  const { cfg, deps } = scope;
  const part = workerComponent(cfg.engine, {
    cluster: agent,
    stager,
    log: deps.log,
    engine: local.engine,
    telemetry: local.telemetry,
    host: deps.engineHost,
    advertiseHost: cfg.node.host,
    engineKey: scope.engineKey,
  });
  return (await scope.stack.start(part)).worker;
}
