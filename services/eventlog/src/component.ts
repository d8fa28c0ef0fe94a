// The event log as a node component: built from the `event_log` section, started before the cluster
// agent (which appends every replicated event to it), serving GET /events, with its metrics.
import { routesOf } from "@ic/http";
import type { Component } from "@ic/http";
import type { Logger } from "@ic/log";
import type { Disk } from "./disk.ts";
import { EventLog } from "./event-log.ts";
import type { EventLogConfig } from "./options.ts";
import { eventLogMetrics } from "./metrics.ts";
import { eventRoutes } from "./routes.ts";

export interface EventLogComponent extends Component {
  readonly eventLog: EventLog;
}

export function eventLogComponent(
  section: EventLogConfig,
  o: { readonly log: Logger; readonly disk?: Disk },
): EventLogComponent {
  const eventLog = new EventLog({
    config: section,
    logger: o.log,
    ...(o.disk ? { disk: o.disk } : {}),
  });
  return {
    name: "eventlog",
    eventLog,
    start: () => eventLog.start(),
    stop: () => eventLog.stop(),
    routes: () => routesOf((app) => eventRoutes(app, eventLog)),
    metrics: (registry) => eventLogMetrics(registry, eventLog),
  };
}
