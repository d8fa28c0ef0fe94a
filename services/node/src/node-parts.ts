// The parts of a node process that node.ts starts around the components: the embedded nats-server,
// the API's listening socket, the cluster agent built from the `cluster` section, and node.host
// resolved to the address engines listen on.
import { lookup } from "node:dns/promises";
import type { RequestListener, Server } from "node:http";
import { createServer } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import { Bus, NatsServer } from "@ic/bus";
import { ClusterAgent } from "@ic/cluster";
import type { HeartbeatExtras } from "@ic/cluster";
import { isLoopback } from "@ic/config";
import type { ClusterCredentials, Config } from "@ic/config";
import type { Component } from "@ic/http";
import type { Logger } from "@ic/log";
import { systemClock } from "@ic/protocol";
import { serverTlsOptions } from "@ic/tls";
import { SecurityHealth } from "./security-health.ts";

/**
 * What the bus needs beside the config: the credentials its clients and routes log in with, the
 * security findings its failed logins go to, and the directory children are recorded in.
 */
export interface BusContext {
  creds: ClusterCredentials;
  security: SecurityHealth;
  childrenDir: string;
}

/**
 * Our own nats-server, routed to the peers (clients and routes need the secret), and this node's
 * connection to it (`bus` once started).
 */
export function busOf(
  cfg: Config,
  log: Logger,
  { creds, security, childrenDir }: BusContext,
): Component & { readonly bus: Bus; readonly clientUrl: string } {
  const server = new NatsServer({
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
    childrenDir,
    // The intent store: JetStream, named by the node's name (stable across its restarts).
    jetstream: { storeDir: cfg.bus.store_dir, serverName: cfg.node.name! },
  });
  let bus: Bus | undefined;
  return {
    name: "bus",
    async start() {
      await server.start();
      try {
        bus = await Bus.connect(server.clientUrl, log, {
          name: cfg.node.name!,
          ...creds.busClient,
        });
      } catch (e) {
        await server.stop();
        throw e;
      }
    },
    async stop() {
      await bus?.close();
      await server.stop();
    },
    get bus() {
      if (!bus) throw new Error("the bus has not started");
      return bus;
    },
    get clientUrl() {
      return server.clientUrl;
    },
  };
}

/**
 * The API's socket (HTTPS with certificates) on node.bind:node.api_port; stopping closes it and
 * every connection still open.
 */
export function apiServer(
  cfg: Config,
  listener: RequestListener,
): Component & { readonly server: () => Server; readonly port: () => number } {
  let server: Server | undefined;
  return {
    name: "http",
    start: () =>
      new Promise<void>((resolve, reject) => {
        const s = cfg.tls
          ? createHttpsServer(serverTlsOptions(cfg.tls), listener)
          : createServer(listener);
        // A model upload (PUT /store/uploads) may take longer than Node's 5-minute default to arrive.
        s.requestTimeout = 60 * 60_000;
        s.once("error", reject);
        s.listen(cfg.node.api_port, cfg.node.bind, () => resolve());
        server = s;
      }),
    stop: () =>
      new Promise<void>((r) => {
        if (!server) return r();
        server.close(() => r());
        server.closeAllConnections();
      }),
    server: () => server!,
    port: () => {
      const addr = server?.address();
      return typeof addr === "object" && addr ? addr.port : cfg.node.api_port;
    },
  };
}

/** What the cluster agent runs on: this node's bus connection and its logger. */
export interface AgentRuntime {
  bus: Bus;
  log: Logger;
}

/** The cluster agent of this node (membership, election, replica, sequencer), not yet started. */
export function clusterAgent(
  cfg: Config,
  { bus, log }: AgentRuntime,
  extras: () => HeartbeatExtras,
  self: { readonly peerKey: string; readonly apiUrl: string; readonly startedAt: number },
): ClusterAgent {
  return new ClusterAgent({
    bus,
    log,
    clock: systemClock,
    self: {
      peerKey: self.peerKey,
      name: cfg.node.name!,
      host: cfg.node.host,
      apiUrl: self.apiUrl,
      startedAt: self.startedAt,
    },
    timings: {
      heartbeatMs: cfg.cluster.heartbeat_ms,
      livenessTimeoutMs: cfg.cluster.liveness_timeout_ms,
      electionTimeoutMs: cfg.cluster.election_timeout_ms,
    },
    memory: { contextSize: cfg.engine.context_size },
    scaleWindows: {
      upMs: cfg.cluster.scale_up_window_ms,
      downMs: cfg.cluster.scale_down_window_ms,
      // A retiring replica's requests have ended by then (as the task table's bound below).
      retireMs: cfg.chat.total_timeout_ms + 60_000,
    },
    // A task its gateway never reported ended expires once its request's bound has passed.
    taskBounds: { maxAgeMs: cfg.chat.total_timeout_ms + 60_000 },
    // Deployments and registered models, durable across a full restart (JetStream key-value),
    // replicated on up to three nodes (fixed when the store is created: see intent-store.ts).
    intents: bus.intentStore(log, { replicas: Math.min(3, cfg.cluster.peers.length + 1) }),
    extras,
  });
}

/** The IP address behind `node.host` (engines bind to an address, never to 0.0.0.0). */
export async function resolveAddress(host: string): Promise<string> {
  try {
    return (await lookup(host)).address;
  } catch (e) {
    throw new Error(`node.host ${host} does not resolve: ${(e as Error).message}`, { cause: e });
  }
}

/** The node's security findings: an anonymous or clear-text API beyond loopback, failed logins. */
export function securityHealth(cfg: Config, log: Logger): SecurityHealth {
  const anonymous = cfg.auth.tokens.length === 0;
  return new SecurityHealth({
    log: log.child({ component: "security" }),
    now: Date.now,
    anonymousApi: anonymous && !isLoopback(cfg.node.bind) ? { bind: cfg.node.bind } : undefined,
    plaintext: !cfg.tls && !isLoopback(cfg.node.bind) ? { bind: cfg.node.bind } : undefined,
  });
}
