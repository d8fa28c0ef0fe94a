// Observability as a node component: GET /metrics (node and cluster gauges, the chat counters, the
// local engines' metrics), the dashboard's series, this node's log lines, and its runners' logs
// answered on the bus for GET /instances/{id}/logs on any node.
import type { Bus } from "@ic/bus";
import { routesOf } from "@ic/http";
import type { Component } from "@ic/http";
import type { LogTail } from "@ic/log";
import type { ChatObserver, ChatRequestSeen, PeerApis } from "@ic/protocol";
import { NodeMetrics } from "./metrics.ts";
import type { MetricsSources } from "./metrics.ts";
import { observabilityRoutes } from "./routes.ts";
import { serveRunnerLogs } from "./runner-logs.ts";
import type { RunnerLogSource } from "./runner-logs.ts";
import { SeriesRecorder, seriesRoutes } from "./series.ts";

export interface ObservabilityComponent extends Component {
  readonly nodeMetrics: NodeMetrics;
  /** Counts one chat request (its observer) for /metrics and the series. */
  observe(r: ChatRequestSeen): ChatObserver | undefined;
}

export function observabilityComponent(
  dashboard: { readonly sample_interval_ms: number },
  o: {
    /** What /metrics reads. */
    readonly sources: Omit<MetricsSources, "onRequest">;
    readonly bus: Pick<Bus, "request" | "respond">;
    readonly runnerLogs: Omit<RunnerLogSource, "peerKey" | "name">;
    readonly peers: PeerApis;
    readonly logTail: LogTail;
  },
): ObservabilityComponent {
  const { bus, peers, logTail, sources } = o;
  const series = new SeriesRecorder(dashboard.sample_interval_ms, Date.now());
  const metrics = new NodeMetrics({ ...sources, onRequest: (r) => series.record(r) });
  const runnerLogs: RunnerLogSource = {
    ...o.runnerLogs,
    peerKey: sources.peerKey,
    name: sources.name,
  };
  let unserve: (() => void) | undefined;
  let sampler: NodeJS.Timeout | undefined;
  // The dashboard's charts: what this gateway served and every node's memory, the last hour.
  const sample = () => {
    const memory = sources.cluster.livePeers().flatMap((p) => {
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
  };
  return {
    name: "observability",
    nodeMetrics: metrics,
    observe: (r) => metrics.observe(r),
    start() {
      unserve = serveRunnerLogs(bus, runnerLogs);
      sampler = setInterval(sample, dashboard.sample_interval_ms);
    },
    stop() {
      clearInterval(sampler);
      unserve?.();
    },
    routes: () =>
      routesOf((app) => {
        seriesRoutes(app, { node: sources.name, recorder: series, peers });
        observabilityRoutes(app, {
          name: sources.name,
          cluster: sources.cluster,
          bus,
          log: sources.log,
          metrics,
          logTail,
          runnerLogs,
        });
      }),
  };
}
