// The worker's parts of a node as components: the engine (found and asked what it can do), the
// telemetry path (readings, link measurements, what each heartbeat carries) and the worker itself
// (the runners of the instances assigned here). Each takes its config section whole and declares
// its metrics (metrics.ts).
import type { Bus } from "@ic/bus";
import type { Config } from "@ic/config";
import {
  locateEngine,
  probeCacheRoot,
  probeSlotRestore,
  probeSplitSupport,
  probeTls,
} from "@ic/engine";
import { routesOf } from "@ic/http";
import type { Component } from "@ic/http";
import type { Logger } from "@ic/log";
import { GiB } from "@ic/protocol";
import type { EngineInfo, SlotRestore } from "@ic/protocol";
import { LinkProber } from "./links.ts";
import { splitProbeCommands } from "./probe-commands.ts";
import type { LinkTarget } from "./links.ts";
import type { ClusterPort, Stager } from "./ports.ts";
import { runnerMetrics, telemetryMetrics } from "./metrics.ts";
import { TelemetryCollector } from "./telemetry.ts";

import { Worker } from "./worker.ts";

type EngineSection = Config["engine"];
type TlsFiles = { readonly certFile: string; readonly keyFile: string };
type ModeResult = Awaited<ReturnType<typeof probeTls>>;

export interface EngineComponent extends Component {
  /** What start() found (throws before it). */
  info(): EngineInfo;
  /** The files engines serve HTTPS with, when the node has certificates and the engine can. */
  tls(): TlsFiles | undefined;
}

/** Finds the engine and asks it which cross-node splits and whether HTTPS it supports. */
export function engineComponent(
  section: EngineSection,
  o: {
    readonly log: Logger;
    /** The node's certificate: engines serve HTTPS with it where the engine can. */
    readonly tls?: TlsFiles | undefined;
    /** What the TLS probe answered (the node's security health reports it). */
    readonly onTlsProbe?: (r: ModeResult) => void;
  },
): EngineComponent {
  let info: EngineInfo | undefined;
  let tls: TlsFiles | undefined;
  return {
    name: "engine",
    async start() {
      const located = await locateEngine({
        serverBinOverride: section.server_bin,
        rpcBinOverride: section.rpc_bin,
      });
      // What the engine can split across nodes, asked of the engine with the runner's own command
      // lines (cached per build and flags).
      const probed = await probeSplitSupport(located, {
        cacheDir: probeCacheRoot(),
        commands: splitProbeCommands(section, located.backend),
      });
      const split = { ...probed, tensor_opt_in: section.experimental_tensor_split };
      info = { ...located, split };
      o.log.info({ split }, "engine split modes across nodes (capability probe)");
      // With certificates, engines serve HTTPS where the engine can (asked of it, not assumed).
      if (o.tls && located.usable) {
        const r = await probeTls(located.server_bin ?? undefined, o.tls);
        o.onTlsProbe?.(r);
        if (r.supported) tls = o.tls;
      }
      if (!info.usable)
        o.log.warn({ engine: info }, "engine unusable; this node cannot run instances");
      else info = { ...info, slot_restore: await probeSlots(located.server_bin, o.log) };
    },
    info: () => {
      if (!info) throw new Error("the engine component has not started");
      return info;
    },
    tls: () => tls,
  };
}

/**
 * Whether this build moves a conversation's KV cache between servers (slot-probe.ts), asked of the
 * engine once per build (two engine starts with a tiny model, under a second) and bounded: a build
 * that hangs counts as one that cannot.
 */
async function probeSlots(serverBin: string | null, log: Logger): Promise<SlotRestore> {
  const r = await probeSlotRestore(serverBin, { cacheDir: probeCacheRoot(), timeoutMs: 15_000 });
  if (r.supported)
    log.info({ slot_restore: r }, "engine moves KV caches between servers (slot-restore probe)");
  else
    log.warn(
      { slot_restore: r },
      "engine cannot move KV caches between servers (slot-restore probe)",
    );
  return r;
}

export interface TelemetryComponent extends Component {
  readonly collector: TelemetryCollector;
}

/**
 * Readings of this node and its links to the peers, handed to each heartbeat through the bounded
 * queue, and marked published when this node's own heartbeat comes back over the bus; the path's
 * counters at GET /v1/diagnostics/telemetry and in /metrics.
 */
export function telemetryComponent(
  node: Pick<Config["node"], "backend" | "memory_limit_gb">,
  o: {
    readonly log: Logger;
    readonly engine: () => EngineInfo;
    readonly modelsPath: string;
    readonly heartbeatMs: number;
    readonly bus: Pick<Bus, "subscribe">;
    readonly peerKey: string;
    /** This node's name (the diagnostics say whose they are). */
    readonly name: string;
    /** The live peers to measure links to (this node excluded). */
    readonly peers: () => readonly LinkTarget[];
  },
): TelemetryComponent {
  const collector = new TelemetryCollector({
    log: o.log,
    engine: o.engine,
    declaredBackend: node.backend,
    modelsPath: o.modelsPath,
    intervalMs: o.heartbeatMs,
    memoryLimitBytes: node.memory_limit_gb !== undefined ? node.memory_limit_gb * GiB : undefined,
  });
  const links = new LinkProber(1000);
  let unechoed: (() => void) | undefined;
  let probe: NodeJS.Timeout | undefined;
  return {
    name: "telemetry",
    collector,
    async start() {
      await collector.start();
      unechoed = o.bus.subscribe("heartbeat", (hb) => {
        if (hb.peer_key === o.peerKey) collector.published(hb.sent_at);
      });
      probe = setInterval(() => {
        void links.probe(o.peers()).then(() => collector.offer("links", links.current));
      }, o.heartbeatMs);
    },
    async stop() {
      clearInterval(probe);
      unechoed?.();
      await collector.stop();
    },
    heartbeat: () => collector.heartbeatPart(),
    routes: () => telemetryRoutes(collector, { node: o.name, peer_key: o.peerKey }),
    metrics: (registry) =>
      telemetryMetrics(registry, collector, { node: o.name, peer_key: o.peerKey }),
  };
}

/** GET /v1/diagnostics/telemetry: the telemetry path's counters of this node. */
export function telemetryRoutes(
  collector: Pick<TelemetryCollector, "diagnostics">,
  who: { readonly node: string; readonly peer_key: string },
): ReturnType<typeof routesOf> {
  return routesOf((app) =>
    app.get("/v1/diagnostics/telemetry", (c) => c.json(collector.diagnostics(who))),
  );
}

export interface WorkerComponent extends Component {
  readonly worker: Worker;
}

/** The runners of the instances assigned to this node (worker.ts). */
export function workerComponent(
  section: EngineSection,
  o: {
    readonly cluster: ClusterPort;
    readonly stager: Stager;
    readonly log: Logger;
    readonly engine: EngineComponent;
    readonly telemetry: TelemetryCollector;
    /** Address engines listen on: the node's own address (an IP), never 0.0.0.0. */
    readonly host: string;
    /** Address in runner endpoints (the node's advertised `node.host`). */
    readonly advertiseHost: string;
    readonly engineKey: string;
  },
): WorkerComponent {
  const worker = new Worker({
    cluster: o.cluster,
    stager: o.stager,
    log: o.log,
    engine: () => o.engine.info(),
    gpus: () => o.telemetry.telemetry?.gpus ?? [],
    host: o.host,
    advertiseHost: o.advertiseHost,
    engineKey: o.engineKey,
    engineTls: o.engine.tls(),
    settings: section,
  });
  return {
    name: "worker",
    worker,
    start: () => worker.start(),
    stop: () => worker.stop(),
    heartbeat: () => ({ runners: worker.runners(), health: worker.health() }),
    metrics: (registry) => runnerMetrics(registry, () => worker.runnerViews()),
  };
}
