// The observability endpoints of a node (the observability component's routes): GET /metrics,
// GET /logs and GET /instances/{id}/logs.
// Every one is a read of this node's own state (runner logs: of the node holding the rank).
import type { Hono } from "hono";
import type { Bus } from "@ic/bus";
import type { ClusterView } from "@ic/protocol";
import type { Logger, LogTail } from "@ic/log";
import type { NodeMetrics } from "./metrics.ts";
import { nodeLogRoutes } from "./node-logs.ts";
import { runnerLogRoutes } from "./runner-logs.ts";
import type { RunnerLogSource } from "./runner-logs.ts";

export interface ObservabilityOptions {
  readonly name: string;
  readonly cluster: ClusterView;
  readonly bus: Pick<Bus, "request">;
  readonly log: Logger;
  readonly metrics: Pick<NodeMetrics, "render" | "contentType">;
  readonly logTail: LogTail;
  readonly runnerLogs: RunnerLogSource;
}

export function observabilityRoutes(app: Hono, o: ObservabilityOptions): void {
  app.get("/metrics", async (c) =>
    c.body(await o.metrics.render(), 200, { "content-type": o.metrics.contentType }),
  );
  nodeLogRoutes(app, { name: o.name, tail: o.logTail });
  runnerLogRoutes(app, { cluster: o.cluster, bus: o.bus, local: o.runnerLogs, log: o.log });
}
