// One node: its embedded nats-server, the bus, telemetry, the cluster agent, the worker and the HTTP API.
// Components start in dependency order and stop in reverse order; stop() is idempotent.
import { randomBytes, randomUUID } from "node:crypto";
import { lookup } from "node:dns/promises";
import { basename, dirname } from "node:path";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import { createServer } from "node:http";
import { createServer as createHttpsServer, Server as HttpsServer } from "node:https";
import type { Hono } from "hono";
import { Bus, NatsServer } from "@ic/bus";
import type { Config } from "@ic/config";
import { engineCacheRoot, locateEngine, probeSplitSupport, probeTls } from "@ic/engine";
import { serverTlsOptions, trustClusterCa } from "@ic/tls";
import { childrenDir, sweepOrphans } from "@ic/process";
import type { Logger } from "@ic/log";
import { ClusterAgent } from "@ic/cluster";
import { GiB, ServiceError, systemClock } from "@ic/protocol";
import type { EngineInfo, ModelId } from "@ic/protocol";
import { createGatewayApp, RequestLoad } from "@ic/gateway";
import { TokenSet } from "@ic/http";
import type { ChatObserver } from "@ic/protocol";
import { EventLog, eventRoutes } from "@ic/eventlog";
import { Tracing, tracingRoutes } from "@ic/tracing";
import { LinkProber, readModelDir, TelemetryCollector, Worker } from "@ic/worker";
import { ClusterSecret, clusterCredentials, isLoopback, stagingFor } from "@ic/config";
import { LiveStagingSettings, stagingSettings } from "@ic/staging";
import { StoreStager } from "./store-stager.ts";
import { ConfigReloader, reloadRoutes, withNodeToken } from "./reload.ts";
import type { ReloadResponse } from "./reload.ts";
import {
  createHubSource,
  looseEntryHealth,
  missingModelHealth,
  PullManager,
  pullRoutes,
  servePulls,
  servePurge,
  StoreHost,
  storeRoutes,
  StoreWatch,
  type LooseEntry,
} from "@ic/store";
import { openApiRoutes } from "./openapi.ts";
import { dashboardRoutes, SettingsFile } from "@ic/dashboard";
import { SecurityHealth } from "./security-health.ts";
import { LoopMonitor } from "./loop-monitor.ts";
import { processLogTail } from "@ic/log";
import { NodeMetrics } from "./observability/metrics.ts";
import { SeriesRecorder, seriesRoutes } from "./observability/series.ts";
import { observabilityRoutes } from "./observability/routes.ts";
import { serveRunnerLogs } from "./observability/runner-logs.ts";
import type { RunnerLogSource } from "./observability/runner-logs.ts";
import { apiListener } from "./api-listener.ts";
import { PeerWatch, watchRoutes } from "./peer-watch.ts";
import { healthRoutes } from "./health-route.ts";
import type { NodePhase } from "./health-route.ts";
import { Drain, engineBusy } from "./drain.ts";
import { quiesceConnections } from "./http-quiesce.ts";
import type { DrainResult } from "./drain.ts";

export interface NodeOptions {
  readonly config: Config;
  readonly log: Logger;
  /** The config file `config` was loaded from (expanded): the settings editor writes to it. */
  readonly configFile?: string | undefined;
  /** Called when POST /admin/restart asks for a fresh process image. */
  readonly onRestartRequested?: () => void;
  /** POST /admin/drain: the process drains and stops (as on SIGTERM). */
  readonly onDrainRequested?: () => void;
  /** Unhandled rejections the process guard logged (for /metrics). */
  readonly unhandledRejections?: () => number;
}

type Stoppable = { stop(): Promise<void> | void; name: string };

export class Node implements AsyncDisposable {
  readonly peerKey = `p-${randomUUID()}`;
  readonly startedAt = Date.now();
  private readonly stack: Stoppable[] = [];
  private stopping: Promise<void> | undefined;
  private started = false;
  /** Set from the first drain(): the heartbeat says `draining` from then on. */
  private drainer: Drain | undefined;
  /** The API's server: a drain ends by letting its connections close (http-quiesce.ts). */
  private httpServer: Server | undefined;
  /** Aborted by a second SIGTERM: the drain stops waiting for connections to close. */
  private readonly drainCut = new AbortController();
  /** Chat requests this node's gateway has in flight (a drain waits for them too). */
  private chatLoad: RequestLoad | undefined;
  private reloader: ConfigReloader | undefined;
  private engineHeaders: ((instanceId: string) => Record<string, string>) | undefined;
  private engineInfo: EngineInfo | undefined;
  agent: ClusterAgent | undefined;
  eventLog: EventLog | undefined;
  tracing: Tracing | undefined;
  worker: Worker | undefined;
  app: Hono | undefined;
  apiPort = 0;
  natsUrl = "";

  constructor(private readonly o: NodeOptions) {}

  get apiUrl(): string {
    return `${this.o.config.tls ? "https" : "http"}://${this.o.config.node.host}:${this.apiPort}`;
  }

  async start(): Promise<void> {
    const cfg = this.o.config;
    const name = cfg.node.name!;
    const log = this.o.log.child({ node: name });

    // 0. Credentials (the bus ones derived from the cluster secret); the address engines listen on.
    const creds = clusterCredentials(cfg.cluster.secret);
    // The secret in force for what nodes present to each other (node token, heartbeat proof): a
    // reload may rotate it; the bus credentials above stay those the node started with.
    const clusterSecret = new ClusterSecret(cfg.cluster.secret, cfg.cluster.rotation_secret);
    // The API key of this node's engines: random, made at each start (its engines start with it),
    // told to the other members in heartbeats. Not derived from the cluster secret, so rotating the
    // secret leaves running engines reachable; nor from an instance id (one node, one key).
    const engineKey = `ice_${randomBytes(24).toString("base64url")}`;
    const anonymous = cfg.auth.tokens.length === 0;
    const security = new SecurityHealth({
      log: log.child({ component: "security" }),
      now: Date.now,
      anonymousApi: anonymous && !isLoopback(cfg.node.bind) ? { bind: cfg.node.bind } : undefined,
      plaintext: !cfg.tls && !isLoopback(cfg.node.bind) ? { bind: cfg.node.bind } : undefined,
    });
    // With certificates, this process's HTTPS clients (peer fan-outs, store downloads, the cluster
    // watch, link pings, the relay to engines) accept the cluster CA's certificates.
    if (cfg.tls) trustClusterCa(cfg.tls.ca);
    const engineHost = await resolveAddress(cfg.node.host);
    // Children a previous run left behind (killed -9 before it could stop them) go first.
    const children = childrenDir(cfg.engine.runner_log_dir);
    const swept = await sweepOrphans(children);
    if (swept.killed.length > 0)
      log.warn({ killed: swept.killed }, "killed children a previous run left behind");

    // 1. Bus: our own nats-server, routed to the peers; clients and routes need the secret.
    const nats = new NatsServer({
      bin: cfg.bus.server_bin,
      bind: cfg.node.bind,
      host: cfg.node.host,
      clientBind: cfg.bus.client_bind,
      clientPort: cfg.bus.client_port,
      clusterPort: cfg.bus.cluster_port,
      clusterName: cfg.bus.cluster_name,
      routes: cfg.cluster.peers,
      clientAuth: creds.busClient,
      routeAuth: creds.busRoute,
      routeTls: cfg.tls
        ? { certFile: cfg.tls.cert_file, keyFile: cfg.tls.key_file, caFile: cfg.tls.ca_file }
        : undefined,
      log: log.child({ component: "nats-server" }),
      onAuthFailure: (f) => security.record(f),
      childrenDir: children,
      // The intent store: JetStream, named by the node's name (stable across its restarts).
      jetstream: { storeDir: cfg.bus.store_dir, serverName: name },
    });
    await nats.start();
    this.stack.push({ name: "nats-server", stop: () => nats.stop() });
    this.natsUrl = nats.clientUrl;
    const bus = await Bus.connect(nats.clientUrl, log, { name, ...creds.busClient });
    this.stack.push({ name: "bus", stop: () => bus.close() });

    // 2. The durable event log (records the replicated control stream; backs GET /events).
    const eventLog = new EventLog({
      config: cfg.event_log,
      logger: log.child({ component: "eventlog" }),
    });
    await eventLog.start();
    this.stack.push({ name: "eventlog", stop: () => eventLog.stop() });
    this.eventLog = eventLog;

    // 3. Engine and telemetry.
    const located = await locateEngine({
      serverBinOverride: cfg.engine.server_bin,
      rpcBinOverride: cfg.engine.rpc_bin,
    });
    // What the engine can split across nodes, asked of the engine (cached per build).
    const probed = await probeSplitSupport(located, { cacheDir: engineCacheRoot() });
    const split = { ...probed, tensor_opt_in: cfg.engine.experimental_tensor_split };
    this.engineInfo = { ...located, split };
    log.info({ split }, "engine split modes across nodes (capability probe)");
    // With certificates, engines serve HTTPS where the engine can (asked of it, not assumed).
    let engineTls: { certFile: string; keyFile: string } | undefined;
    if (cfg.tls && located.usable) {
      const files = { certFile: cfg.tls.cert_file, keyFile: cfg.tls.key_file };
      const tls = await probeTls(located.server_bin ?? undefined, files);
      security.engineTls(tls);
      if (tls.supported) engineTls = files;
    }
    if (!this.engineInfo.usable)
      log.warn({ engine: this.engineInfo }, "engine unusable; this node cannot run instances");
    const telemetry = new TelemetryCollector({
      log,
      engine: () => this.engineInfo!,
      declaredBackend: cfg.node.backend,
      modelsPath: cfg.node_cache_path,
      intervalMs: cfg.cluster.heartbeat_ms,
      memoryLimitBytes:
        cfg.node.memory_limit_gb !== undefined ? cfg.node.memory_limit_gb * GiB : undefined,
    });
    await telemetry.start();
    this.stack.push({ name: "telemetry", stop: () => telemetry.stop() });
    const links = new LinkProber(1000);
    const loopMonitor = new LoopMonitor();
    loopMonitor.start();
    this.stack.push({ name: "loop-monitor", stop: () => loopMonitor.stop() });

    // 4. HTTP API. It listens first (so heartbeats can advertise its port); requests get 503 until the app is wired.
    let app: Hono | undefined;
    const serve = apiListener(() => app, log);
    // While draining, every answer closes its connection (`Connection: close`): clients and load
    // balancers open their next request elsewhere instead of reusing a socket this node will close.
    const listener = (req: IncomingMessage, res: ServerResponse) => {
      if (this.drainer) res.shouldKeepAlive = false;
      return serve(req, res);
    };
    const server = await new Promise<Server>((resolve, reject) => {
      const s = cfg.tls
        ? createHttpsServer(serverTlsOptions(cfg.tls), listener)
        : createServer(listener);
      // A model upload (PUT /store/uploads) may take longer than Node's 5-minute default to arrive.
      s.requestTimeout = 60 * 60_000;
      s.once("error", reject);
      s.listen(cfg.node.api_port, cfg.node.bind, () => resolve(s));
    });
    this.httpServer = server;
    const addr = server.address();
    this.apiPort = typeof addr === "object" && addr ? addr.port : cfg.node.api_port;
    this.stack.push({
      name: "http",
      stop: () =>
        new Promise<void>((r) => {
          server.close(() => r());
          server.closeAllConnections();
        }),
    });
    let worker: Worker | undefined;
    // The staging section in force on this node (its override applied); the settings editor replaces it.
    const settings = new LiveStagingSettings(stagingSettings(stagingFor(cfg, name)));
    // The store host (a node with store_path) serves registered artifacts under /store/models on this API.
    // Its model pulls (POST /store/pulls) download from model_store.hub_url; the hub token comes
    // from the environment only and is never logged.
    const storeHost = cfg.store_path
      ? new StoreHost({
          storePath: cfg.store_path,
          logger: log,
          headroomBytes: settings,
          hub: createHubSource({
            hubUrl: cfg.model_store.hub_url,
            accessToken: process.env.HF_TOKEN,
          }),
          transferIdleTimeoutMs: cfg.model_store.transfer_idle_timeout_ms,
        })
      : undefined;
    /** Bumped when the store's models change (a pull finished, a copied model found): re-register. */
    let storeVersion = 0;
    /** Models whose directory was removed by hand while in use, with the master's refusal. */
    const missingModels = new Map<ModelId, string>();
    /** What lies unserved at the top of store_path (a loose .gguf, a misnamed folder). */
    let looseInStore: LooseEntry[] = [];
    const pulls = storeHost
      ? new PullManager({
          target: storeHost,
          onDone: () => void storeVersion++,
          // A model whose model.json names a drafter or an MTP sidecar brings it along.
          missingCompanions: (id) => storeHost.missingCompanions(id),
        })
      : undefined;
    if (storeHost) {
      await storeHost.start();
      this.stack.push({ name: "store-host", stop: () => storeHost.stop() });
      this.stack.push({ name: "pulls", stop: () => pulls!.stop() });
    }
    // This node's chat requests in flight: the gateway balances on it, heartbeats tell the others.
    const chatLoad = new RequestLoad();
    this.chatLoad = chatLoad;
    const agent = new ClusterAgent({
      bus,
      log,
      clock: systemClock,
      self: {
        peerKey: this.peerKey,
        name,
        host: cfg.node.host,
        apiUrl: this.apiUrl,
        startedAt: this.startedAt,
      },
      timings: {
        heartbeatMs: cfg.cluster.heartbeat_ms,
        livenessTimeoutMs: cfg.cluster.liveness_timeout_ms,
        electionTimeoutMs: cfg.cluster.election_timeout_ms,
      },
      memory: { contextSize: cfg.engine.context_size },
      // A task its gateway never reported ended expires once its request's bound has passed.
      taskBounds: { maxAgeMs: cfg.chat.total_timeout_ms + 60_000 },
      // Deployments and registered models, durable across a full restart (JetStream key-value).
      // Replicated on up to three nodes (fixed when the store is created: see intent-store.ts).
      intents: bus.intentStore(log, { replicas: Math.min(3, cfg.cluster.peers.length + 1) }),
      extras: () => {
        // The telemetry path's samples (readings, health, links) through its bounded queue.
        const part = telemetry.heartbeatPart();
        const outstanding = chatLoad.heartbeatPart();
        // Other nodes heard (the agent exists once heartbeats are sent): one look for both uses.
        const heard = (this.agent?.livePeers() ?? []).filter(
          (p) => p.heartbeat.peer_key !== this.peerKey,
        );
        return {
          ...(outstanding ? { outstanding } : {}),
          ...(this.drainer ? { draining: true as const } : {}),
          loop_delay: loopMonitor.sample(),
          engine_key: engineKey,
          secret_proof: clusterSecret.proof(this.peerKey),
          telemetry: part.telemetry,
          links: part.links,
          runners: worker?.runners() ?? [],
          ...(pulls && pulls.list().length > 0 ? { pulls: pulls.list() } : {}),
          health: [
            ...part.health,
            ...security.entries(
              heard.length,
              heard
                .filter(
                  ({ heartbeat: h }) =>
                    h.secret_proof !== undefined &&
                    !clusterSecret.accepts(h.peer_key, h.secret_proof),
                )
                .map((p) => p.heartbeat.name)
                .sort(),
            ),
            ...missingModelHealth(missingModels),
            ...looseEntryHealth(looseInStore),
            ...(worker?.health() ?? []),
          ],
        };
      },
    });
    this.agent = agent;
    // Our own heartbeat back from the bus: the telemetry samples it carried are published.
    const unechoed = bus.subscribe("heartbeat", (hb) => {
      if (hb.peer_key === this.peerKey) telemetry.published(hb.sent_at);
    });
    this.stack.push({ name: "telemetry-echo", stop: () => unechoed() });
    // Runner logs of this node, for GET /instances/{id}/logs on any node.
    const runnerLogs: RunnerLogSource = {
      peerKey: this.peerKey,
      name,
      runnerLogDir: cfg.engine.runner_log_dir,
      logFileOf: (id, rank) => worker?.supervisorFor(id, rank)?.spec.logFile,
    };
    const unserveLogs = serveRunnerLogs(bus, runnerLogs);
    this.stack.push({ name: "runner-logs", stop: () => unserveLogs() });
    // Staging: startup reconciliation of orphaned copies runs before any runner starts.
    // The hub token comes from the environment only and is never logged.
    const hubUrl = cfg.model_store.hub_fallback ? cfg.model_store.hub_url : undefined;
    const stager = new StoreStager({
      root: cfg.node_cache_path,
      settings,
      log,
      cluster: agent,
      storeLocalPath: cfg.store_path,
      storeToken: () => clusterSecret.token(),
      transferIdleTimeoutMs: cfg.model_store.transfer_idle_timeout_ms,
      hub: hubUrl
        ? {
            source: createHubSource({ hubUrl, accessToken: process.env.HF_TOKEN }),
            modelCachePath: cfg.model_store.hub_cache_path,
          }
        : undefined,
    });
    await stager.start();
    this.stack.push({ name: "staging", stop: () => stager.stop() });
    // Live peers' APIs (this node excluded) for the cluster-wide views (traces, storage), asked
    // with the cluster's node token (read scope).
    const peerApis = {
      token: () => clusterSecret.token(),
      list: () =>
        agent
          .livePeers()
          .filter((p) => p.heartbeat.peer_key !== this.peerKey && p.heartbeat.api_url)
          .map((p) => ({ name: p.heartbeat.name, apiUrl: p.heartbeat.api_url })),
    };
    const storeOpts = {
      peers: peerApis,
      bus,
      cluster: agent,
      stager,
      eventLog,
      nodeCachePath: cfg.node_cache_path,
      settings,
      name,
      log,
    };
    // An engine answers to the key its node made at start (engineKey above), which that node's
    // heartbeats tell the other members: the key of an instance is its rank-0 node's.
    const engineAuth = new Map<string, Record<string, string>>();
    const engineHeaders = (instanceId: string): Record<string, string> => {
      const rank0 = agent.snapshot().instances[instanceId]?.assignments.find((a) => a.rank === 0);
      const key =
        rank0 === undefined
          ? undefined
          : rank0.peer_key === this.peerKey
            ? engineKey
            : agent.peer(rank0.peer_key)?.heartbeat.engine_key;
      if (key === undefined) return {};
      let h = engineAuth.get(key);
      if (!h) {
        if (engineAuth.size >= 1024) engineAuth.clear();
        h = Object.freeze({ authorization: `Bearer ${key}` });
        engineAuth.set(key, h);
      }
      return h;
    };
    this.engineHeaders = engineHeaders;
    const apiTokens = new TokenSet(withNodeToken(cfg.auth.tokens, clusterSecret.acceptedTokens()));
    const reloader = new ConfigReloader({
      file: this.o.configFile,
      set: apiTokens,
      initial: cfg.auth.tokens,
      secret: clusterSecret,
      // Renewed certificates: the API's new connections and this process's clients. nats-server
      // keeps its route certificate until the node restarts: its config reload re-checks the routes'
      // authorization and dropped them for seconds when tried (the routes' certificate, from the
      // same CA, stays valid meanwhile).
      tls: {
        initial: cfg.tls,
        apply: (next) => {
          if (server instanceof HttpsServer) server.setSecureContext(serverTlsOptions(next));
          trustClusterCa(next.ca);
        },
      },
      name,
      log,
    });
    this.reloader = reloader;
    // Per-request observers of the chat path (tracing, metrics): each returns one or nothing.
    const chatObservers: ((r: {
      commandId: string;
      receivedAt: number;
    }) => ChatObserver | undefined)[] = [];
    // Per-request tracing: Chrome trace files under tracing.dir, written after each response.
    const tracing = new Tracing({
      config: cfg.tracing,
      log: log.child({ component: "tracing" }),
      node: name,
    });
    await tracing.start();
    this.stack.push({ name: "tracing", stop: () => tracing.stop() });
    this.tracing = tracing;
    chatObservers.push(tracing.observe);
    // The dashboard's charts: what this gateway served and every node's memory, the last hour.
    const series = new SeriesRecorder(cfg.dashboard.sample_interval_ms, Date.now());
    const sampler = setInterval(() => {
      const memory = agent.livePeers().flatMap((p) => {
        const t = p.heartbeat.telemetry;
        return t
          ? [
              {
                node: p.heartbeat.name,
                used_bytes: Math.max(0, t.memory_total_bytes - t.memory_free_bytes),
                total_bytes: t.memory_total_bytes,
              },
            ]
          : [];
      });
      series.sample(Date.now(), memory);
    }, cfg.dashboard.sample_interval_ms);
    this.stack.push({ name: "series", stop: () => clearInterval(sampler) });
    // GET /metrics: node and cluster gauges, chat counters (an observer), the local engines' metrics.
    const metrics = new NodeMetrics({
      onRequest: (r) => series.record(r),
      name,
      peerKey: this.peerKey,
      cluster: agent,
      log: log.child({ component: "metrics" }),
      telemetry: () => telemetry.telemetry,
      telemetryDiagnostics: () => telemetry.diagnostics({ node: name, peer_key: this.peerKey }),
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
      unhandledRejections: this.o.unhandledRejections ?? (() => 0),
      ...(pulls ? { pulls: () => pulls.list() } : {}),
    });
    chatObservers.push((r) => metrics.observe(r));
    app = createGatewayApp({
      cluster: agent,
      log,
      name,
      restart: () => this.o.onRestartRequested?.(),
      drain: () => this.o.onDrainRequested?.(),
      infoPendingWaitMs: cfg.cluster.info_pending_wait_ms,
      stateStreamPeriodMs: cfg.cluster.heartbeat_ms,
      contextSize: cfg.engine.context_size,
      chatLimits: {
        defaultMaxTokens: cfg.chat.default_max_tokens,
        connectTimeoutMs: cfg.chat.connect_timeout_ms,
        idleTimeoutMs: cfg.chat.idle_timeout_ms,
        totalTimeoutMs: cfg.chat.total_timeout_ms,
        migrateStreams: cfg.chat.migrate_streams,
        prefixRouting: cfg.chat.prefix_routing,
      },
      onChatMigration: (m) => metrics.migration(m),
      // With tokens configured, peers present the cluster's node token (read scope: store downloads).
      // The set is replaced on a reload (SIGHUP, POST /admin/reload).
      auth: { tokens: apiTokens },
      engineHeaders,
      load: chatLoad,
      observeChat: (r) => combineObservers(chatObservers.map((f) => f(r))),
      extensions: [
        (a) => eventRoutes(a, eventLog),
        (a) => reloadRoutes(a, reloader),
        (a) =>
          seriesRoutes(a, {
            node: name,
            recorder: series,
            peers: { token: peerApis.token, list: peerApis.list },
          }),
        (a) =>
          observabilityRoutes(a, {
            name,
            cluster: agent,
            bus,
            log,
            telemetry,
            metrics,
            logTail: processLogTail(),
            runnerLogs,
          }),
        (a) =>
          tracingRoutes(a, {
            tracing,
            node: name,
            fanOut: { token: peerApis.token, peers: peerApis.list },
          }),
        (a) => storeRoutes(a, storeOpts),
        (a) => pullRoutes(a, { bus, cluster: agent }),
        (a) => watchRoutes(a, { agent, log }),
        (a) => healthRoutes(a, { agent, name, phase: () => this.phase() }),
        (a) => openApiRoutes(a),
        (a) =>
          dashboardRoutes(a, {
            log,
            settings: new SettingsFile({
              file: this.o.configFile,
              nodeName: name,
              live: settings,
            }),
          }),
        ...(storeHost ? [(a: Hono) => a.route("/", storeHost.app)] : []),
      ],
    });
    agent.on({ event: (ev) => eventLog.append(ev) });
    this.app = app;

    // 5. Cluster agent (election, replica) and link probing.
    // The fast failure signal: a watch connection to the master (see peer-watch.ts). It closes after
    // the agent stops, so a master probing this node on the drop finds nothing answering: a
    // graceful stop is noticed as fast as a kill.
    const peerWatch = new PeerWatch({
      agent,
      log,
      self: { peerKey: this.peerKey, startedAt: this.startedAt },
      token: anonymous ? undefined : () => clusterSecret.token(),
    });
    this.stack.push({ name: "peer-watch", stop: () => peerWatch.stop() });
    agent.start();
    this.stack.push({ name: "cluster", stop: () => agent.stop() });
    peerWatch.start();
    const probe = setInterval(() => {
      const targets = agent
        .livePeers()
        .filter((p) => p.heartbeat.peer_key !== this.peerKey && p.heartbeat.api_url)
        .map((p) => ({ peer_key: p.heartbeat.peer_key, api_url: p.heartbeat.api_url }));
      void links.probe(targets).then(() => telemetry.offer("links", links.current));
    }, cfg.cluster.heartbeat_ms);
    this.stack.push({ name: "links", stop: () => clearInterval(probe) });

    // 6. Purge broadcasts and the worker: runners for the instances assigned here.
    const unservePurge = servePurge(storeOpts);
    this.stack.push({ name: "purge", stop: () => unservePurge() });
    if (pulls) {
      const unservePulls = servePulls(bus, pulls, storeHost!, { name, apiUrl: this.apiUrl });
      this.stack.push({ name: "pull-requests", stop: () => unservePulls() });
    }
    worker = new Worker({
      cluster: agent,
      stager,
      log,
      engine: () => this.engineInfo!,
      gpus: () => telemetry.telemetry?.gpus ?? [],
      host: engineHost,
      advertiseHost: cfg.node.host,
      engineKey,
      engineTls,
      runnerLogDir: cfg.engine.runner_log_dir,
      contextSize: cfg.engine.context_size,
      gpuLayers: cfg.engine.gpu_layers,
      warmupDeadlineMs: cfg.engine.warmup_deadline_seconds * 1000,
      restartBackoffMs: cfg.engine.restart_backoff_ms,
      healthyUptimeMs: cfg.engine.healthy_uptime_ms,
      engineNiceness: cfg.engine.niceness,
      portBase: cfg.engine.port_base,
      extraArgs: cfg.engine.extra_args,
    });
    this.worker = worker;
    worker.start();
    this.stack.push({ name: "worker", stop: () => worker!.stop() });

    // 7. A store host registers the models it holds once it has joined a session (and after each change).
    // Models copied into store_path while running are registered once their files settle (store-watch.ts).
    if (storeHost) {
      const watch = new StoreWatch({
        storePath: cfg.store_path!,
        registered: (id) => storeHost.manifest(id) !== undefined,
        register: (id) => storeHost.register(id),
        onAdded: (id) => {
          missingModels.delete(id);
          storeVersion++;
        },
        onLoose: (loose) => {
          const before = new Set(looseInStore.map((e) => e.name));
          for (const e of loose)
            if (!before.has(e.name)) log.warn({ entry: e.name }, `store_path: ${e.hint}`);
          looseInStore = loose;
        },
        registeredIds: () => [
          ...storeHost.models().map((m) => m.model_id),
          ...[...missingModels.keys()].filter((id) => storeHost.manifest(id) === undefined),
        ],
        // Removed by hand: no longer served, and out of the registry; while something uses it the
        // master refuses, so it stays in nodeHealth (store_model_missing) and each scan asks again.
        onRemoved: (id) => {
          storeHost.forget(id);
          agent.command({ type: "DeregisterModel", model_id: id }).then(
            () => missingModels.delete(id),
            (e: unknown) => {
              if (!missingModels.has(id))
                log.warn(
                  { err: e, modelId: id },
                  "a model directory was removed from store_path while the model is in use; it leaves the registry once nothing uses it",
                );
              missingModels.set(id, e instanceof Error ? e.message : String(e));
            },
          );
        },
        log,
      });
      watch.start();
      this.stack.push({ name: "store-watch", stop: () => watch.stop() });
      let registeredFor: string | null = null;
      const register = async () => {
        const due = `${agent.sessionId}/${storeVersion}`;
        if (!agent.synced || registeredFor === due) return;
        await storeHost.registerAll();
        const ids: string[] = [];
        for (const manifest of storeHost.models()) {
          const dir = storeHost.modelPath(manifest.model_id);
          const rec = await readModelDir(dirname(dir), basename(dir), log);
          if (!rec) continue;
          await agent.command({
            type: "RegisterModel",
            model: {
              ...rec,
              bytes: manifest.total_bytes,
              registered_by: agent.nodeId!,
              store_url: this.apiUrl,
            },
          });
          ids.push(rec.model_id);
        }
        registeredFor = due;
        log.info({ models: ids }, "registered store models");
      };
      const t = setInterval(
        () => register().catch((e: unknown) => log.debug({ err: e }, "model registration retry")),
        500,
      );
      this.stack.push({ name: "registry", stop: () => clearInterval(t) });
    }
    this.started = true;
    log.info({ api: this.apiUrl, nats: nats.clientUrl, peer_key: this.peerKey }, "node started");
  }

  /** SIGHUP: the API tokens from the config file again (reload.ts); throws a ServiceError when refused. */
  async reloadTokens(): Promise<ReloadResponse> {
    if (!this.reloader) throw new ServiceError("unavailable", "node starting");
    return this.reloader.reload();
  }

  /** For GET /health: started once start() has finished, then draining, then stopping. */
  phase(): NodePhase {
    if (this.stopping) return "stopping";
    if (this.drainer) return "draining";
    return this.started ? "started" : "starting";
  }

  /**
   * Before a planned stop: says `draining` in the heartbeat (gateways route around this node's
   * instances at once, and the master places its deployments elsewhere when a node can take them),
   * hands the session to a successor when this node is the master (open requests cluster-wide keep
   * their session), and waits, up to node.drain_timeout_ms, for the requests in flight on its
   * engines and through its gateway to end and for its deployments' new instances to be ready
   * (docs/operations.md, "Draining"). Undefined when there is nothing to drain.
   */
  async drain(): Promise<DrainResult | undefined> {
    const agent = this.agent;
    if (!this.started || this.stopping || !agent) return undefined;
    const mine = () =>
      Object.values(agent.snapshot().instances).filter((i) =>
        i.assignments.some((a) => a.peer_key === this.peerKey),
      );
    const relaying = () => {
      let n = 0;
      for (const v of this.chatLoad?.local().values() ?? []) n += v;
      return n;
    };
    // The deployments served here when the drain began: the master places each elsewhere first
    // when a node can take it; the drain then also waits for those new instances to be ready.
    const here = new Set(
      Object.values(agent.snapshot().deployments)
        .filter((d) => mine().some((i) => i.instance_id === d.instance_id))
        .map((d) => d.deployment_id),
    );
    const movingElsewhere = () => {
      const s = agent.snapshot();
      let n = 0;
      for (const id of here) {
        const inst = s.instances[s.deployments[id]?.instance_id ?? ""];
        if (!inst || inst.assignments.some((a) => a.peer_key === this.peerKey)) continue;
        if (s.runners[`${inst.instance_id}/0`]?.state !== "RunnerReady") n++;
      }
      return n;
    };
    const log = this.o.log.child({ node: this.o.config.node.name, component: "drain" });
    const handOff = this.drainer
      ? undefined
      : agent.handOff().then(
          (to) => {
            if (to) log.info({ successor: to }, "handed the master role off");
          },
          (e: unknown) => log.warn({ err: (e as Error).message }, "master hand-off failed"),
        );
    this.drainer ??= new Drain({
      announce: () => agent.publishHeartbeat(),
      hasInstances: () => mine().length > 0 || relaying() > 0,
      busy: async () => {
        const runners = agent.snapshot().runners;
        const counts = await Promise.all(
          mine().map(async (i) => {
            const endpoint = runners[`${i.instance_id}/0`]?.endpoint;
            if (!endpoint?.startsWith("http")) return 0;
            try {
              const res = await fetch(`${endpoint}/metrics`, {
                headers: this.engineHeaders?.(i.instance_id) ?? {},
                signal: AbortSignal.timeout(2000),
              });
              return res.ok ? engineBusy(await res.text()) : 0;
            } catch {
              return 0; // the engine is gone: nothing of it to wait for
            }
          }),
        );
        return counts.reduce((a, b) => a + b, 0) + relaying() + movingElsewhere();
      },
      settleMs: 500,
      timeoutMs: this.o.config.node.drain_timeout_ms,
      log,
    });
    const [r] = await Promise.all([this.drainer.run(), handOff]);
    // Last, the API stops taking connections and lets the open ones end (at most one more answer
    // each, or their client's keep-alive timer): none is reset under a request in its pool.
    const server = this.httpServer;
    const left = server
      ? await quiesceConnections(server, server.keepAliveTimeout + 1000, this.drainCut.signal)
      : 0;
    this.o.log.info({ ...r, connections_left: left }, "drained");
    return r;
  }

  /** A second SIGTERM: stop waiting for requests in flight. */
  cancelDrain(): void {
    this.drainer?.cancel();
    this.drainCut.abort();
  }

  async stop(): Promise<void> {
    this.stopping ??= (async () => {
      for (const c of this.stack.reverse()) {
        try {
          await c.stop();
        } catch (e) {
          this.o.log.warn({ err: e, component: c.name }, "stop failed");
        }
      }
    })();
    await this.stopping;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

/** The IP address behind `node.host` (engines bind to an address, never to 0.0.0.0). */
async function resolveAddress(host: string): Promise<string> {
  try {
    return (await lookup(host)).address;
  } catch (e) {
    throw new Error(`node.host ${host} does not resolve: ${(e as Error).message}`, { cause: e });
  }
}

/** One observer for several (undefined when none observes: the chat path then skips its events). */
function combineObservers(list: (ChatObserver | undefined)[]): ChatObserver | undefined {
  const live = list.filter((x): x is ChatObserver => x !== undefined);
  if (live.length === 0) return undefined;
  if (live.length === 1) return live[0];
  return { event: (e) => live.forEach((o) => o.event(e)) };
}
