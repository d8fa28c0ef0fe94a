// The event log's own metrics, read from a registry as a scrape reads them.
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { eventLogMetrics } from "./metrics.ts";
import type { EventLogUsage } from "./options.ts";

describe("eventLogMetrics", () => {
  it("gives the mode (one of two set) and the bytes of the active file and archives", async () => {
    const registry = new Registry();
    let usage = { mode: "normal", active_bytes: 100, archive_bytes: 20 } as EventLogUsage;
    eventLogMetrics(registry, { usage: () => usage });
    const text = await registry.metrics();
    expect(text).toContain('ic_node_event_log_mode{mode="normal"} 1');
    expect(text).toContain('ic_node_event_log_mode{mode="counting-only"} 0');
    expect(text).toContain("ic_node_event_log_bytes 120");
    usage = { mode: "counting-only", active_bytes: 5, archive_bytes: 0 } as EventLogUsage;
    const later = await registry.metrics();
    expect(later).toContain('ic_node_event_log_mode{mode="counting-only"} 1');
    expect(later).toContain("ic_node_event_log_bytes 5");
  });
});
