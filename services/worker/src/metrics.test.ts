// The worker's metrics as a scrape reads them from a registry: the runners' gauges from their views,
// the readings and the telemetry path from a source.
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import type { Telemetry, TelemetryDiagnostics } from "@ic/protocol";
import { runnerMetrics, telemetryMetrics } from "./metrics.ts";
import type { RunnerView } from "./metrics.ts";

/** The value of `name` with these labels in a scrape (undefined when the series is absent). */
function valueOf(text: string, name: string, labels = ""): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${name}${labels} `));
  return line === undefined ? undefined : Number(line.split(" ").at(-1));
}

describe("runnerMetrics", () => {
  it("counts runners by state and gives each its restarts, warm-up so far and staging progress", async () => {
    const registry = new Registry();
    const now = 100_000;
    const views: RunnerView[] = [
      { instance_id: "i-r", model_id: "acme/x", rank: 0, state: "RunnerReady", restarts: 2 },
      {
        instance_id: "i-w",
        model_id: "acme/x",
        rank: 1,
        state: "RunnerWarmingUp",
        restarts: 0,
        warmup_started_at: now - 5000,
      },
      {
        instance_id: "i-s",
        model_id: "acme/y",
        rank: 0,
        state: "RunnerStaging",
        restarts: 0,
        progress: { staged_bytes: 300, total_bytes: 1000, started_at: now - 1 },
      },
    ];
    runnerMetrics(
      registry,
      () => views,
      () => now,
    );
    const text = await registry.metrics();
    expect(valueOf(text, "ic_node_runners", '{state="RunnerReady"}')).toBe(1);
    expect(valueOf(text, "ic_node_runners", '{state="RunnerFailed"}')).toBe(0);
    const r = (id: string, model: string, rank = 0) =>
      `{model="${model}",ic_instance="${id}",rank="${rank}"}`;
    expect(valueOf(text, "ic_runner_restarts", r("i-r", "acme/x"))).toBe(2);
    expect(valueOf(text, "ic_runner_restarts", r("i-w", "acme/x", 1))).toBe(0);
    expect(valueOf(text, "ic_runner_warmup_seconds", r("i-w", "acme/x", 1))).toBe(5);
    expect(valueOf(text, "ic_runner_warmup_seconds", r("i-r", "acme/x"))).toBeUndefined();
    expect(valueOf(text, "ic_runner_staged_bytes", r("i-s", "acme/y"))).toBe(300);
    expect(valueOf(text, "ic_runner_stage_total_bytes", r("i-s", "acme/y"))).toBe(1000);
  });
});

describe("telemetryMetrics", () => {
  it("gives the last readings (no GPU series before the first), and the telemetry path", async () => {
    const registry = new Registry();
    let telemetry: Telemetry | null = null;
    const diagnostics = {
      kinds: {},
      queue: { depth: 3 },
      publish: { latency: { p50_ms: 20, p99_ms: null, max_ms: 40 } },
    } as unknown as TelemetryDiagnostics;
    telemetryMetrics(
      registry,
      {
        get telemetry() {
          return telemetry;
        },
        diagnostics: () => diagnostics,
      },
      { node: "node-a", peer_key: "p-a" },
    );
    expect(await registry.metrics()).not.toContain("ic_node_gpu_memory_free_bytes{");
    telemetry = {
      memory_total_bytes: 64e9,
      memory_free_bytes: 48e9,
      disk_free_bytes: 5e11,
      gpus: [{ vendor: "nvidia", model: "H100", vram_total_bytes: 80e9, vram_free_bytes: 70e9 }],
    } as unknown as Telemetry;
    const text = await registry.metrics();
    expect(valueOf(text, "ic_node_memory_free_bytes")).toBe(48e9);
    expect(valueOf(text, "ic_node_gpus")).toBe(1);
    expect(
      valueOf(text, "ic_node_gpu_memory_free_bytes", '{gpu="0",vendor="nvidia",gpu_model="H100"}'),
    ).toBe(70e9);
    expect(valueOf(text, "ic_telemetry_queue_depth")).toBe(3);
    expect(valueOf(text, "ic_telemetry_publish_latency_seconds", '{quantile="0.5"}')).toBe(0.02);
    expect(
      valueOf(text, "ic_telemetry_publish_latency_seconds", '{quantile="0.99"}'),
    ).toBeUndefined();
  });
});
