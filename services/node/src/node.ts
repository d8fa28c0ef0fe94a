// One node process: its embedded nats-server and bus connection, the API's listening socket, and the
// components buildNode wires (build-node.ts). Parts start in order and stop in reverse order; stop()
// is idempotent. A planned stop drains first (drain.ts).
import { randomUUID } from "node:crypto";
import type { Server } from "node:http";
import { Server as HttpsServer } from "node:https";
import type { ClusterAgent } from "@ic/cluster";
import type { Config } from "@ic/config";
import { ClusterSecret, clusterCredentials } from "@ic/config";
import { ComponentStack } from "@ic/http";
import type { Logger } from "@ic/log";
import { childrenDir, sweepOrphans } from "@ic/process";
import { ServiceError } from "@ic/protocol";
import { serverTlsOptions, trustClusterCa } from "@ic/tls";
import { apiListener } from "./api-listener.ts";
import { buildNode } from "./build-node.ts";
import type { BuiltNode, NodeHooks } from "./build-node.ts";
import { nodeDrain } from "./drain.ts";
import type { Drain, DrainResult } from "./drain.ts";
import type { NodePhase } from "./health-route.ts";
import { quiesceConnections } from "./http-quiesce.ts";
import { apiServer, clusterAgent, busOf, resolveAddress, securityHealth } from "./node-parts.ts";
import type { ReloadResponse } from "./reload.ts";

export interface NodeOptions extends NodeHooks {
  readonly config: Config;
  readonly log: Logger;
}

export class Node implements AsyncDisposable {
  readonly peerKey = `p-${randomUUID()}`;
  readonly startedAt = Date.now();
  private readonly stack: ComponentStack;
  private readonly log: Logger;
  private built: BuiltNode<ClusterAgent> | undefined;
  private stopping: Promise<void> | undefined;
  /** Set from the first drain(): the heartbeat says `draining` from then on. */
  private drainer: Drain | undefined;
  /** The API's server: a drain ends by letting its connections close (http-quiesce.ts). */
  private httpServer: Server | undefined;
  /** Aborted by a second SIGTERM: the drain stops waiting for connections to close. */
  private readonly drainCut = new AbortController();
  apiPort = 0;
  natsUrl = "";

  constructor(private readonly o: NodeOptions) {
    this.log = o.log.child({ node: o.config.node.name! });
    this.stack = new ComponentStack(this.log);
  }

  get apiUrl(): string {
    return `${this.o.config.tls ? "https" : "http"}://${this.o.config.node.host}:${this.apiPort}`;
  }

  async start(): Promise<void> {
    const cfg = this.o.config;
    const { log, stack } = this;
    const creds = clusterCredentials(cfg.cluster.secret);
    // The secret in force for what nodes present to each other (node token, heartbeat proof): a
    // reload may rotate it; the bus credentials above stay those the node started with.
    const secret = new ClusterSecret(cfg.cluster.secret, cfg.cluster.rotation_secret);
    const security = securityHealth(cfg, log);
    // With certificates, this process's HTTPS clients (peer fan-outs, store downloads, the cluster
    // watch, link pings, the relay to engines) accept the cluster CA's certificates.
    if (cfg.tls) trustClusterCa(cfg.tls.ca);
    const engineHost = await resolveAddress(cfg.node.host);
    // Children a previous run left behind (killed -9 before it could stop them) go first.
    const children = childrenDir(cfg.engine.runner_log_dir);
    const swept = await sweepOrphans(children);
    if (swept.killed.length > 0)
      log.warn({ killed: swept.killed }, "killed children a previous run left behind");

    // The bus: our own nats-server, routed to the peers, and this node's connection to it.
    const { bus, clientUrl } = await stack.start(
      busOf(cfg, log, { creds, security, childrenDir: children }),
    );
    this.natsUrl = clientUrl;
    // The API listens before the node is built (heartbeats advertise its port); it answers 503 until
    // the app is wired. While draining, every answer closes its connection (`Connection: close`).
    const serve = apiListener(() => this.built?.app, log);
    const api = await stack.start(
      apiServer(cfg, (req, res) => {
        if (this.drainer) res.shouldKeepAlive = false;
        return serve(req, res);
      }),
    );
    const server = (this.httpServer = api.server());
    this.apiPort = api.port();
    this.built = await buildNode(
      cfg,
      {
        log,
        peerKey: this.peerKey,
        startedAt: this.startedAt,
        bus,
        cluster: (extras) => clusterAgent(cfg, { bus, log }, extras, this),
        apiUrl: this.apiUrl,
        engineHost,
        secret,
        security,
        phase: () => this.phase(),
        draining: () => this.drainer !== undefined,
        hooks: this.o,
        // Renewed certificates: the API's new connections and this process's clients. nats-server
        // keeps its route certificate until the node restarts: its config reload re-checks the
        // routes' authorization and dropped them for seconds when tried (the routes' certificate,
        // from the same CA, stays valid meanwhile).
        applyTls: (next) => {
          if (server instanceof HttpsServer) server.setSecureContext(serverTlsOptions(next));
          trustClusterCa(next.ca);
        },
      },
      stack,
    );
    log.info({ api: this.apiUrl, nats: this.natsUrl, peer_key: this.peerKey }, "node started");
  }

  /** SIGHUP: the API tokens from the config file again (reload.ts); throws a ServiceError when refused. */
  async reloadTokens(): Promise<ReloadResponse> {
    if (!this.built) throw new ServiceError("unavailable", "node starting");
    return this.built.reloader.reload();
  }

  /** For GET /health: started once start() has finished, then draining, then stopping. */
  phase(): NodePhase {
    if (this.stopping) return "stopping";
    if (this.drainer) return "draining";
    return this.built ? "started" : "starting";
  }

  /**
   * Before a planned stop: says `draining` in the heartbeat (gateways route around this node's
   * instances at once, and the master places its deployments elsewhere when a node can take them),
   * hands the session to a successor when this node is the master, and waits, up to
   * node.drain_timeout_ms, for what is in flight here to end (drain.ts; docs/operations.md,
   * "Draining"). Undefined when there is nothing to drain.
   */
  async drain(): Promise<DrainResult | undefined> {
    const built = this.built;
    if (!built || this.stopping) return undefined;
    const log = this.log.child({ component: "drain" });
    const agent = built.cluster;
    const handOff = this.drainer
      ? undefined
      : agent.handOff().then(
          (to) => void (to && log.info({ successor: to }, "handed the master role off")),
          (e: unknown) => log.warn({ err: (e as Error).message }, "master hand-off failed"),
        );
    this.drainer ??= nodeDrain({
      peerKey: this.peerKey,
      agent,
      relaying: () => built.chatLoad.local().values(),
      engineHeaders: built.engineHeaders,
      timeoutMs: this.o.config.node.drain_timeout_ms,
      handOff: built.warmHandOff,
      kvPending: built.kvPending,
      log,
    });
    const [r] = await Promise.all([this.drainer.run(), handOff]);
    // Last, the API stops taking connections and lets the open ones end (at most one more answer
    // each, or their client's keep-alive timer): none is reset under a request in its pool.
    const server = this.httpServer;
    const left = server
      ? await quiesceConnections(server, server.keepAliveTimeout + 1000, this.drainCut.signal)
      : 0;
    this.log.info({ ...r, connections_left: left }, "drained");
    return r;
  }

  /** A second SIGTERM: stop waiting for requests in flight. */
  cancelDrain(): void {
    this.drainer?.cancel();
    this.drainCut.abort();
  }

  async stop(): Promise<void> {
    this.stopping ??= this.stack.stop();
    await this.stopping;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
