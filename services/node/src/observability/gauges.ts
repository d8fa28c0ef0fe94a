// The gauges and counters /metrics reads at each scrape (prom-client collects them from the
// sources): this node's process, its readings and GPUs, its runners, its storage, its telemetry path,
// and the cluster's view (registered on the master's registry only).
import { Counter, Gauge } from "prom-client";
import type { Registry } from "prom-client";
import type { Telemetry } from "@ic/protocol";
import { RUNNER_STATES } from "@ic/protocol";
import type { LocalRunnerView, MetricsSources } from "./metrics.ts";

const TELEMETRY_OUTCOMES = [
  "offered",
  "admitted",
  "rejected",
  "coalesced",
  "dropped",
  "published",
] as const;

/** Every node gauge: its readings, runners, telemetry path, and the process. */
export function nodeGauges(registry: Registry, o: MetricsSources): void {
  readingGauges(registry, o);
  runnerGauges(registry, o);
  telemetryPathGauges(registry, o);
  processGauges(registry, o);
}

/** Bus sends and the process guard. */
function processGauges(registry: Registry, o: MetricsSources): void {
  const registers = [registry];
  new Counter({
    name: "ic_bus_send_failures_total",
    help: "Bus sends that failed (logged with subject and size), by operation, catalog name and code.",
    labelNames: ["op", "name", "code"],
    registers,
    collect() {
      this.reset();
      for (const f of o.bus?.().failures.values() ?? [])
        this.inc({ op: f.op, name: f.name, code: f.code }, f.count);
    },
  });
  new Gauge({
    name: "ic_bus_message_max_bytes",
    help: "Largest message this node sent on the bus, by catalog name.",
    labelNames: ["name"],
    registers,
    collect() {
      this.reset();
      for (const [name, bytes] of o.bus?.().largest ?? []) this.set({ name }, bytes);
    },
  });
  const traffic = [
    ["ic_bus_messages_total", "Messages", "inMsgs", "outMsgs"],
    ["ic_bus_bytes_total", "Payload bytes", "inBytes", "outBytes"],
  ] as const;
  for (const [name, what, inKey, outKey] of traffic)
    new Counter({
      name,
      help: `${what} this node's bus connection received (in) and sent (out) since it opened.`,
      labelNames: ["direction"],
      registers,
      collect() {
        this.reset();
        const t = o.bus?.().traffic;
        if (!t) return;
        this.inc({ direction: "in" }, t[inKey]);
        this.inc({ direction: "out" }, t[outKey]);
      },
    });
  new Counter({
    name: "ic_unhandled_rejections_total",
    help: "Promise rejections nobody handled (logged; the node kept serving).",
    registers,
    collect() {
      this.reset();
      this.inc(o.unhandledRejections?.() ?? 0);
    },
  });
}

/** This node: who it is, its memory, disk and GPUs as telemetry last read them. */
function readingGauges(registry: Registry, o: MetricsSources): void {
  const registers = [registry];
  const telemetryOf = o.telemetry;
  new Gauge({
    name: "ic_node_info",
    help: "This node (value 1): its peer key and whether it is the master.",
    labelNames: ["peer_key", "is_master"],
    registers,
    collect() {
      this.reset();
      this.set({ peer_key: o.peerKey, is_master: String(o.cluster.isMaster) }, 1);
    },
  });
  const fromTelemetry = (name: string, help: string, read: (t: Telemetry) => number | null) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.reset();
        const t = telemetryOf();
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
        const t = telemetryOf();
        t?.gpus.forEach((g, i) => {
          const v = g[pick];
          if (v !== null) this.set({ gpu: String(i), vendor: g.vendor, gpu_model: g.model }, v);
        });
      },
    });
  gpuGauge("ic_node_gpu_memory_total_bytes", "VRAM of each GPU.", "vram_total_bytes");
  gpuGauge("ic_node_gpu_memory_free_bytes", "Free VRAM of each GPU.", "vram_free_bytes");
}

/** The runners of this node: by state, and each one's restarts, warm-up and staging progress. */
function runnerGauges(registry: Registry, o: MetricsSources): void {
  const registers = [registry];
  new Gauge({
    name: "ic_node_runners",
    help: "Runners on this node by state.",
    labelNames: ["state"],
    registers,
    collect() {
      this.reset();
      const runners = o.runners();
      for (const state of RUNNER_STATES)
        this.set({ state }, runners.filter((r) => r.state === state).length);
    },
  });
  // Per runner of this node; `ic_instance`, not `instance`: Prometheus gives `instance` to the
  // scrape target, and a scraped `instance` label would be renamed `exported_instance`.
  const runnerLabels = ["model", "ic_instance", "rank"] as const;
  const perRunner = (
    name: string,
    help: string,
    value: (r: LocalRunnerView, now: number) => number | undefined,
  ) =>
    new Gauge({
      name,
      help,
      labelNames: runnerLabels,
      registers,
      collect() {
        this.reset();
        const instances = o.cluster.snapshot().instances;
        const now = Date.now();
        for (const r of o.runners()) {
          const v = value(r, now);
          if (v === undefined) continue;
          const model = instances[r.instance_id]?.model_id ?? "unknown";
          this.set({ model, ic_instance: r.instance_id, rank: String(r.rank) }, v);
        }
      },
    });
  perRunner(
    "ic_runner_restarts",
    "Times each runner's engine process was restarted after it exited.",
    (r) => r.restarts ?? 0,
  );
  perRunner(
    "ic_runner_warmup_seconds",
    "How long a warming-up runner's current start has taken so far (absent once it is ready).",
    (r, now) =>
      r.state === "RunnerWarmingUp" && r.warmup_started_at !== undefined
        ? Math.max(0, (now - r.warmup_started_at) / 1000)
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

/** The telemetry path's counters (GET /v1/diagnostics/telemetry has them all). */
function telemetryPathGauges(registry: Registry, o: MetricsSources): void {
  const registers = [registry];
  // The telemetry path's counters (GET /v1/diagnostics/telemetry has them all).
  new Counter({
    name: "ic_telemetry_samples_total",
    help: "Telemetry samples by kind and outcome on their way into heartbeats.",
    labelNames: ["kind", "outcome"],
    registers,
    collect() {
      this.reset();
      for (const [kind, k] of Object.entries(o.telemetryDiagnostics().kinds))
        for (const outcome of TELEMETRY_OUTCOMES) this.inc({ kind, outcome }, k[outcome]);
    },
  });
  new Gauge({
    name: "ic_telemetry_queue_depth",
    help: "Telemetry samples waiting for the next heartbeat.",
    registers,
    collect() {
      this.reset();
      this.set(o.telemetryDiagnostics().queue.depth);
    },
  });
  new Gauge({
    name: "ic_telemetry_publish_latency_seconds",
    help: "Admission of a telemetry sample to its heartbeat seen back on the bus, over the recent window.",
    labelNames: ["quantile"],
    registers,
    collect() {
      this.reset();
      const l = o.telemetryDiagnostics().publish.latency;
      if (l.p50_ms !== null) this.set({ quantile: "0.5" }, l.p50_ms / 1000);
      if (l.p99_ms !== null) this.set({ quantile: "0.99" }, l.p99_ms / 1000);
      if (l.max_ms !== null) this.set({ quantile: "1" }, l.max_ms / 1000);
    },
  });
}

/** The cluster as the master sees it (rendered on the master only). */
export function clusterGauges(registry: Registry, o: MetricsSources): void {
  const registers = [registry];
  registry.setDefaultLabels({ node: o.name });
  const count = (name: string, help: string, read: () => number) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.reset();
        this.set(read());
      },
    });
  count(
    "ic_cluster_members",
    "Members of the current session.",
    () => Object.keys(o.cluster.snapshot().members).length,
  );
  count(
    "ic_cluster_live_nodes",
    "Nodes heard within the liveness timeout (this one included).",
    () => o.cluster.livePeers().length,
  );
  count(
    "ic_cluster_models",
    "Registered models.",
    () => Object.keys(o.cluster.snapshot().models).length,
  );
  count(
    "ic_cluster_tasks_in_flight",
    "Chat tasks the master has open.",
    () => o.openTasks?.() ?? 0,
  );
  count(
    "ic_cluster_state_index",
    "Index of the last sequenced event.",
    () => o.cluster.snapshot().index,
  );
  clusterStateGauges(registry, o);
  sessionGauges(registry, o);
}

/** The replica's instances, runners and deployments by state. */
function clusterStateGauges(registry: Registry, o: MetricsSources): void {
  const registers = [registry];
  new Gauge({
    name: "ic_cluster_instances",
    help: "Instances by whether their rank 0 is ready.",
    labelNames: ["ready"],
    registers,
    collect() {
      this.reset();
      const s = o.cluster.snapshot();
      let ready = 0;
      for (const id of Object.keys(s.instances))
        if (s.runners[`${id}/0`]?.state === "RunnerReady") ready++;
      this.set({ ready: "true" }, ready);
      this.set({ ready: "false" }, Object.keys(s.instances).length - ready);
    },
  });
  new Gauge({
    name: "ic_cluster_runners",
    help: "Runners in the cluster by state.",
    labelNames: ["state"],
    registers,
    collect() {
      this.reset();
      const runners = Object.values(o.cluster.snapshot().runners);
      for (const state of RUNNER_STATES)
        this.set({ state }, runners.filter((r) => r.state === state).length);
    },
  });
  new Gauge({
    name: "ic_cluster_deployments",
    help: "Placement intents by status.",
    labelNames: ["status"],
    registers,
    collect() {
      this.reset();
      const ds = Object.values(o.cluster.snapshot().deployments);
      for (const status of ["Placed", "Pending"] as const)
        this.set({ status }, ds.filter((d) => d.status === status).length);
    },
  });
}

/** The session: its id and master, and when it started. */
function sessionGauges(registry: Registry, o: MetricsSources): void {
  const registers = [registry];
  new Gauge({
    name: "ic_cluster_session_info",
    help: "The current session (value 1) and its master.",
    labelNames: ["session_id", "master_node_id"],
    registers,
    collect() {
      this.reset();
      const s = o.cluster.snapshot().session;
      if (s) this.set({ session_id: s.session_id, master_node_id: s.master_node_id }, 1);
    },
  });
  new Gauge({
    name: "ic_cluster_session_started_seconds",
    help: "When the current session started (Unix time).",
    registers,
    collect() {
      this.reset();
      const s = o.cluster.snapshot().session;
      if (s) this.set(s.started_at / 1000);
    },
  });
}
