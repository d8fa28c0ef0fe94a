// Front door of @ic/tracing: per-request traces of the chat path as Chrome trace files, their stats,
// the janitor, and the /v1/tracing and /v1/traces* routes. Wired by the node launcher:
// new Tracing({ config: cfg.tracing, log, node }), chatObservers.push(tracing.observe), tracingRoutes(app, …).
export { Tracing } from "./tracing.ts";
export type { TracingConfig, TracingOptions, TracingStatus } from "./tracing.ts";
export {
  buildTrace,
  ChromeTraceSchema,
  engineWindow,
  PID,
  SPAN,
  TID,
  traceStats,
  TraceStatsSchema,
} from "./trace.ts";
export type { ChromeTrace, TraceEvent, TraceMeta, TraceRecord, TraceStats } from "./trace.ts";
export {
  isValidTaskId,
  parseTempFileName,
  parseTraceFileName,
  TraceFiles,
  traceFileName,
} from "./files.ts";
export type { TraceEntry } from "./files.ts";
export { DAY_MS, expiredFiles, HOUR_MS, Janitor } from "./janitor.ts";
export type { JanitorOptions } from "./janitor.ts";
export { clusterTraces, clusterTraceStats } from "./cluster.ts";
export type {
  ClusterTraceEntry,
  ClusterTraceList,
  ClusterTraceStats,
  FanOutOptions,
  TracePeer,
  Unreachable,
} from "./cluster.ts";
export { LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX, TracesQuerySchema, tracingRoutes } from "./routes.ts";
export type { TracingRoutesOptions } from "./routes.ts";
export { TRACING_OPERATIONS } from "./operations.ts";
export { tracingComponent, type TracingComponent } from "./component.ts";
