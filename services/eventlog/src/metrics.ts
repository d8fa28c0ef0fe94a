// The event log's metrics, declared in the node's registry: its persistence mode and its size.
import { Gauge } from "prom-client";
import type { Registry } from "prom-client";
import type { EventLog } from "./event-log.ts";

export function eventLogMetrics(registry: Registry, eventLog: Pick<EventLog, "usage">): void {
  const registers = [registry];
  new Gauge({
    name: "ic_node_event_log_mode",
    help: "Event-log persistence mode (1 for the current one): normal, or counting-only when disk is short.",
    labelNames: ["mode"],
    registers,
    collect() {
      this.reset();
      const mode = eventLog.usage().mode;
      for (const m of ["normal", "counting-only"] as const)
        this.set({ mode: m }, m === mode ? 1 : 0);
    },
  });
  new Gauge({
    name: "ic_node_event_log_bytes",
    help: "Bytes of the durable event log (active file and archives).",
    registers,
    collect() {
      this.reset();
      const u = eventLog.usage();
      this.set(u.active_bytes + u.archive_bytes);
    },
  });
}
