// Front door of @ic/eventlog: the bounded durable event log, its pure policies and GET /events.
// Wired by the node launcher: new EventLog({ config: cfg.event_log, logger }), eventRoutes(app, log).
export { EventLog } from "./event-log.ts";
export { READ_LIMIT_DEFAULT, READ_LIMIT_MAX } from "./options.ts";
export type {
  EventLogConfig,
  EventLogDeps,
  EventLogState,
  EventLogUsage,
  ReadQuery,
} from "./options.ts";
export { EventRecordSchema, toRecord } from "./record.ts";
export type { EventRecord } from "./record.ts";
export {
  MODES,
  nextMode,
  planArchiveRotation,
  planCompaction,
  resumeThreshold,
  shouldCheckDisk,
} from "./policy.ts";
export type {
  ArchiveFile,
  CompactionLimits,
  CompactionPlan,
  Mode,
  RotationPlan,
} from "./policy.ts";
export { FakeDisk, nodeFiles, statfsDisk } from "./disk.ts";
export type { AppendHandle, Disk, EventFiles } from "./disk.ts";
export { EVENT_TYPES, EventsQuerySchema, eventRoutes } from "./routes.ts";
export type { EventsQuery, EventsResponse } from "./routes.ts";
export { ACTIVE_FILE } from "./ring-file.ts";
export { EVENT_LOG_OPERATIONS } from "./operations.ts";
export { eventLogComponent, type EventLogComponent } from "./component.ts";
export { eventLogMetrics } from "./metrics.ts";
