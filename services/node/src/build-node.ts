// buildNode: one node's components, built from their config sections, started in order and wired
// into the API. It is the one place that says what a node is made of; node.ts adds the process
// around it (the nats-server, the listening socket, drain and stop) and fuzz.test.ts serves the
// same API over a scripted cluster.
import { randomBytes } from "node:crypto";
import type { Hono } from "hono";
import type { Bus } from "@ic/bus";
import type { ClusterAgent, HeartbeatExtras } from "@ic/cluster";
import type { ClusterSecret, Config, ResolvedTls } from "@ic/config";
import { stagingFor } from "@ic/config";
import { dashboardComponent } from "@ic/dashboard";
import { eventLogComponent } from "@ic/eventlog";
import type { Disk } from "@ic/eventlog";
import { engineAuth, RequestLoad } from "@ic/gateway";
import { ComponentStack, TokenSet } from "@ic/http";
import type { Component } from "@ic/http";
import { processLogTail } from "@ic/log";
import type { LogTail, Logger } from "@ic/log";
import type { ClusterView, PeerApis } from "@ic/protocol";
import { LiveStagingSettings, stagingSettings } from "@ic/staging";
import { createHubSource, storeComponent, storeHostComponent } from "@ic/store";
import { tracingComponent } from "@ic/tracing";
import { engineComponent, telemetryComponent, workerComponent } from "@ic/worker";
import type { ClusterPort, EngineComponent, TelemetryReader } from "@ic/worker";
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

/** What the components ask of the cluster agent (a ClusterAgent; a scripted one in fuzz.test.ts). */
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
  readonly bus: Pick<Bus, "respond" | "request" | "requestMany" | "subscribe" | "sendStats">;
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
  /** Seams for serving the API without an engine or a real disk (fuzz.test.ts). */
  readonly engine?: EngineComponent;
  readonly readTelemetry?: TelemetryReader;
  readonly disk?: Disk;
  readonly logTail?: LogTail;
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

async function compose<C extends NodeCluster>(
  cfg: Config,
  deps: NodeDeps<C>,
  stack: ComponentStack,
): Promise<BuiltNode<C>> {
  const { log, bus, peerKey, secret, hooks = {} } = deps;
  // The key this node's engines start with: random at each start, told to the other members in
  // heartbeats. Not derived from the cluster secret (rotating it leaves engines reachable).
  const engineKey = `ice_${randomBytes(24).toString("base64url")}`;
  const name = cfg.node.name!;
  // The agent is built before the components that use it start; it starts after the API is wired.
  let cluster: C | undefined;
  const otherPeers = () =>
    (cluster?.livePeers() ?? []).filter(
      (p) => p.heartbeat.peer_key !== peerKey && p.heartbeat.api_url,
    );
  // Live peers' APIs for the cluster-wide views (traces, storage, series), asked with the node token.
  const peers: PeerApis = {
    token: () => secret.token(),
    list: () => otherPeers().map((p) => ({ name: p.heartbeat.name, apiUrl: p.heartbeat.api_url })),
  };

  const events = await stack.start(
    eventLogComponent(cfg.event_log, { log, ...(deps.disk ? { disk: deps.disk } : {}) }),
  );
  const eventLog = events.eventLog;
  const engine = await stack.start(
    deps.engine ??
      engineComponent(cfg.engine, {
        log,
        tls: cfg.tls ? { certFile: cfg.tls.cert_file, keyFile: cfg.tls.key_file } : undefined,
        onTlsProbe: (r) => deps.security.engineTls(r),
      }),
  );
  const telemetry = (
    await stack.start(
      telemetryComponent(cfg.node, {
        log,
        engine: () => engine.info(),
        modelsPath: cfg.node_cache_path,
        heartbeatMs: cfg.cluster.heartbeat_ms,
        bus,
        peerKey,
        peers: () =>
          otherPeers().map((p) => ({
            peer_key: p.heartbeat.peer_key,
            api_url: p.heartbeat.api_url,
          })),
        ...(deps.readTelemetry ? { read: deps.readTelemetry } : {}),
      }),
    )
  ).collector;
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
      const heard = otherPeers();
      const foreign = heard
        .filter(({ heartbeat: h }) => h.secret_proof && !secret.accepts(h.peer_key, h.secret_proof))
        .map((p) => p.heartbeat.name)
        .sort();
      return {
        ...(outstanding ? { outstanding } : {}),
        ...(deps.draining() ? { draining: true as const } : {}),
        engine_key: engineKey,
        secret_proof: secret.proof(peerKey),
        health: deps.security.entries(heard.length, foreign),
      };
    },
  });
  cluster = deps.cluster(() => ({ telemetry: null, links: [], runners: [], ...stack.heartbeat() }));
  const agent = cluster;

  // The staging section in force on this node (its override applied); the settings editor replaces it.
  const settings = new LiveStagingSettings(stagingSettings(stagingFor(cfg, name)));
  const storeHost = cfg.store_path
    ? await stack.start(
        storeHostComponent({
          storePath: cfg.store_path,
          modelStore: cfg.model_store,
          settings,
          cluster: agent,
          bus,
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
    hub: hubUrl
      ? {
          source: createHubSource({ hubUrl, accessToken: process.env.HF_TOKEN }),
          modelCachePath: cfg.model_store.hub_cache_path,
        }
      : undefined,
  });
  await stack.start({ name: "staging", start: () => stager.start(), stop: () => stager.stop() });
  const engineHeaders = engineAuth(agent, { peerKey, engineKey });
  const apiTokens = new TokenSet(withNodeToken(cfg.auth.tokens, secret.acceptedTokens()));
  const reloader = new ConfigReloader({
    file: hooks.configFile,
    set: apiTokens,
    initial: cfg.auth.tokens,
    secret,
    // Renewed certificates: the API's new connections and this process's clients. nats-server
    // keeps its route certificate until the node restarts (node.ts).
    tls: { initial: cfg.tls, apply: (next) => deps.applyTls?.(next) },
    name,
    log,
  });
  const tracing = await stack.start(tracingComponent(cfg.tracing, { log, node: name, peers }));
  let worker: ReturnType<typeof workerComponent>["worker"] | undefined;
  const observability = await stack.start(
    observabilityComponent(cfg.dashboard, {
      bus,
      sources: {
        name,
        peerKey,
        cluster: agent,
        log: log.child({ component: "metrics" }),
        telemetry: () => telemetry.telemetry,
        telemetryDiagnostics: () => telemetry.diagnostics({ node: name, peer_key: peerKey }),
        runners: () => worker?.runners() ?? [],
        staging: async () => {
          const entries = await stager.staging.list();
          return { bytes: entries.reduce((s, e) => s + e.bytes, 0), models: entries.length };
        },
        eventLog: () => {
          const u = eventLog.usage();
          return { mode: u.mode, bytes: u.active_bytes + u.archive_bytes };
        },
        engineHeaders,
        bus: () => bus.sendStats,
        openTasks: () => agent.openTasks(),
        unhandledRejections: hooks.unhandledRejections ?? (() => 0),
        ...(storeHost ? { pulls: () => storeHost.pulls.list() } : {}),
      },
      runnerLogs: {
        runnerLogDir: cfg.engine.runner_log_dir,
        logFileOf: (id, rank) => worker?.supervisorFor(id, rank)?.spec.logFile,
      },
      peers,
      logTail: deps.logTail ?? processLogTail(),
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
  const dashboard = dashboardComponent({
    log,
    file: hooks.configFile,
    nodeName: name,
    live: settings,
  });
  // The fast failure signal: a watch connection to the master (peer-watch.ts). It closes after the
  // agent stops, so a master probing this node on the drop finds nothing answering: a graceful stop
  // is noticed as fast as a kill.
  const peerWatch = new PeerWatch({
    agent,
    log,
    self: { peerKey, startedAt: deps.startedAt },
    token: cfg.auth.tokens.length === 0 ? undefined : () => secret.token(),
  });
  const clusterPart: Component = {
    name: "cluster",
    start: () => {
      agent.start?.();
      peerWatch.start();
    },
    stop: async () => {
      await agent.stop?.();
      peerWatch.stop();
    },
    routes: (a) => {
      watchRoutes(a, { agent, log });
      healthRoutes(a, { agent, name, phase: deps.phase });
    },
  };
  const app = nodeApi(cfg, {
    cluster: agent,
    log,
    hooks,
    tokens: apiTokens,
    engineHeaders,
    load: chatLoad,
    routes: {
      events,
      reload: { name: "reload", routes: (a) => reloadRoutes(a, reloader) },
      observability,
      tracing,
      store,
      cluster: clusterPart,
      dashboard,
      storeHost,
    },
  });
  agent.on({ event: (ev) => eventLog.append(ev) });
  await stack.start(clusterPart);
  worker = (
    await stack.start(
      workerComponent(cfg.engine, {
        cluster: agent,
        stager,
        log,
        engine,
        telemetry,
        host: deps.engineHost,
        advertiseHost: cfg.node.host,
        engineKey,
      }),
    )
  ).worker;
  return { app, cluster: agent, stack, chatLoad, engineHeaders, reloader, stager };
}
