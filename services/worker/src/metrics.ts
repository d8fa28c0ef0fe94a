// The worker's metrics, declared in the node's registry by its components (Component.metrics): this
// node's readings as telemetry last took them (memory, disk, GPUs), the telemetry path's counters,
// and the runners (by state; each one's restarts, warm-up and staging progress).
import { Counter, Gauge } from "prom-client";
import type { Registry } from "prom-client";
import { RUNNER_STATES } from "@ic/protocol";
import type { Runner, RunnerState, Telemetry, TelemetryDiagnostics } from "@ic/protocol";

const TELEMETRY_OUTCOMES = [
  "offered",
  "admitted",
  "rejected",
  "coalesced",
  "dropped",
  "published",
] as const;

/** What the telemetry metrics read: the last readings, and the path's counters (the collector). */
export interface TelemetrySource {
  readonly telemetry: Telemetry | null;
  diagnostics(who: { readonly node: string; readonly peer_key: string }): TelemetryDiagnostics;
}

/** This node's memory, disk and GPUs as telemetry last read them, and the telemetry path. */
export function telemetryMetrics(
  registry: Registry,
  source: TelemetrySource,
  who: { readonly node: string; readonly peer_key: string },
): void {
  readingGauges(registry, source);
  telemetryPathGauges(registry, () => source.diagnostics(who));
}

function readingGauges(registry: Registry, source: TelemetrySource): void {
  const registers = [registry];
  const fromTelemetry = (name: string, help: string, read: (t: Telemetry) => number | null) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.reset();
        const t = source.telemetry;
        const v = t ? read(t) : null;
        if (v !== null) this.set(v);
      },
    });
  fromTelemetry(
    "ic_node_memory_total_bytes",
    "Memory this node offers to placement (RAM, or VRAM where the engine serves on GPU).",
    (t) => t.memory_total_bytes,
  );
  fromTelemetry(
    "ic_node_memory_free_bytes",
    "Memory available to a new runner.",
    (t) => t.memory_free_bytes,
  );
  fromTelemetry(
    "ic_node_disk_free_bytes",
    "Free space on the models volume.",
    (t) => t.disk_free_bytes,
  );
  fromTelemetry("ic_node_gpus", "GPUs this node sees.", (t) => t.gpus.length);
  const gpuGauge = (name: string, help: string, pick: "vram_total_bytes" | "vram_free_bytes") =>
    new Gauge({
      name,
      help,
      labelNames: ["gpu", "vendor", "gpu_model"],
      registers,
      collect() {
        this.reset();
        source.telemetry?.gpus.forEach((g, i) => {
          const v = g[pick];
          if (v !== null) this.set({ gpu: String(i), vendor: g.vendor, gpu_model: g.model }, v);
        });
      },
    });
  gpuGauge("ic_node_gpu_memory_total_bytes", "VRAM of each GPU.", "vram_total_bytes");
  gpuGauge("ic_node_gpu_memory_free_bytes", "Free VRAM of each GPU.", "vram_free_bytes");
}

/** The telemetry path's counters (GET /v1/diagnostics/telemetry has them all). */
function telemetryPathGauges(registry: Registry, diagnostics: () => TelemetryDiagnostics): void {
  const registers = [registry];
  new Counter({
    name: "ic_telemetry_samples_total",
    help: "Telemetry samples by kind and outcome on their way into heartbeats.",
    labelNames: ["kind", "outcome"],
    registers,
    collect() {
      this.reset();
      for (const [kind, k] of Object.entries(diagnostics().kinds))
        for (const outcome of TELEMETRY_OUTCOMES) this.inc({ kind, outcome }, k[outcome]);
    },
  });
  new Gauge({
    name: "ic_telemetry_queue_depth",
    help: "Telemetry samples waiting for the next heartbeat.",
    registers,
    collect() {
      this.reset();
      this.set(diagnostics().queue.depth);
    },
  });
  new Gauge({
    name: "ic_telemetry_publish_latency_seconds",
    help: "Admission of a telemetry sample to its heartbeat seen back on the bus, over the recent window.",
    labelNames: ["quantile"],
    registers,
    collect() {
      this.reset();
      const l = diagnostics().publish.latency;
      if (l.p50_ms !== null) this.set({ quantile: "0.5" }, l.p50_ms / 1000);
      if (l.p99_ms !== null) this.set({ quantile: "0.99" }, l.p99_ms / 1000);
      if (l.max_ms !== null) this.set({ quantile: "1" }, l.max_ms / 1000);
    },
  });
}

/** A runner of this node as its metrics see it (the worker's slot). */
export interface RunnerView {
  readonly instance_id: string;
  readonly model_id: string;
  readonly rank: number;
  readonly state: RunnerState;
  readonly restarts: number;
  /** While staging: bytes on local disk so far, of the total. */
  readonly progress?: NonNullable<Runner["progress"]>;
  /** While warming up: when the current start began (ms). */
  readonly warmup_started_at?: number;
}

/** The runners of this node: by state, and each one's restarts, warm-up and staging progress. */
export function runnerMetrics(
  registry: Registry,
  runners: () => readonly RunnerView[],
  now: () => number = Date.now,
): void {
  const registers = [registry];
  new Gauge({
    name: "ic_node_runners",
    help: "Runners on this node by state.",
    labelNames: ["state"],
    registers,
    collect() {
      this.reset();
      const all = runners();
      for (const state of RUNNER_STATES)
        this.set({ state }, all.filter((r) => r.state === state).length);
    },
  });
  // Per runner; `ic_instance`, not `instance`: Prometheus gives `instance` to the scrape target,
  // and a scraped `instance` label would be renamed `exported_instance`.
  const perRunner = (name: string, help: string, value: (r: RunnerView) => number | undefined) =>
    new Gauge({
      name,
      help,
      labelNames: ["model", "ic_instance", "rank"],
      registers,
      collect() {
        this.reset();
        for (const r of runners()) {
          const v = value(r);
          if (v !== undefined)
            this.set({ model: r.model_id, ic_instance: r.instance_id, rank: String(r.rank) }, v);
        }
      },
    });
  perRunner(
    "ic_runner_restarts",
    "Times each runner's engine process was restarted after it exited.",
    (r) => r.restarts,
  );
  perRunner(
    "ic_runner_warmup_seconds",
    "How long a warming-up runner's current start has taken so far (absent once it is ready).",
    (r) =>
      r.state === "RunnerWarmingUp" && r.warmup_started_at !== undefined
        ? Math.max(0, (now() - r.warmup_started_at) / 1000)
        : undefined,
  );
  perRunner(
    "ic_runner_staged_bytes",
    "A staging runner's model bytes on local disk so far.",
    (r) => (r.state === "RunnerStaging" ? r.progress?.staged_bytes : undefined),
  );
  perRunner(
    "ic_runner_stage_total_bytes",
    "A staging runner's model size (what staged_bytes reaches).",
    (r) => (r.state === "RunnerStaging" ? r.progress?.total_bytes : undefined),
  );
}
