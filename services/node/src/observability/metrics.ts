// GET /metrics: this node in the Prometheus text format (prom-client). Node gauges (memory, GPUs,
// disk, runners by state, staging bytes, event-log mode, the telemetry queue), chat request counters
// and histograms by model and status (fed by a ChatObserver), on the master the cluster gauges, and
// every local llama-server's own /metrics re-exported with model, instance and rank labels.
// Label values are bounded: a chat request for a model the cluster does not know is labelled
// `unknown`, so clients cannot grow the series without bound.
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { ChatEvent, ChatObserver, EngineTimings } from "@ic/protocol";
import type { ClusterView } from "@ic/protocol";
import type { Logger } from "@ic/log";
import { RUNNER_STATES } from "@ic/protocol";
import type { Pull, RunnerState, Telemetry, TelemetryDiagnostics } from "@ic/protocol";
import type { BusSendStats } from "@ic/bus";
import { mergeFamilies, parseExposition, renderFamilies } from "./prom-text.ts";
import type { PromFamily } from "./prom-text.ts";
import type { RequestOutcome } from "./series.ts";

/** A runner of this node, as the worker reports it. */
export interface LocalRunnerView {
  readonly instance_id: string;
  readonly rank: number;
  readonly state: RunnerState;
  readonly endpoint?: string;
  readonly restarts?: number;
  /** While staging: bytes on local disk so far, of the total. */
  readonly progress?: { readonly staged_bytes: number; readonly total_bytes: number };
  /** While warming up: when the current start began (ms). */
  readonly warmup_started_at?: number;
}

export interface MetricsSources {
  readonly name: string;
  readonly peerKey: string;
  readonly cluster: ClusterView;
  readonly log: Logger;
  readonly telemetry: () => Telemetry | null;
  readonly telemetryDiagnostics: () => TelemetryDiagnostics;
  readonly runners: () => readonly LocalRunnerView[];
  /** Staged copies on this node (bytes, count). */
  readonly staging: () => Promise<{ bytes: number; models: number }>;
  readonly eventLog: () => { mode: "normal" | "counting-only"; bytes: number };
  /** Headers for an instance's llama-server (its API key). */
  readonly engineHeaders: (instanceId: string) => Record<string, string>;
  /** How long one engine scrape may take (default 2 s). */
  readonly scrapeTimeoutMs?: number;
  /** The bus connection's failed sends and largest messages. */
  readonly bus?: () => BusSendStats;
  /** Unhandled rejections the process guard logged. */
  readonly unhandledRejections?: () => number;
  /** Master only: chat tasks open in its task table. */
  readonly openTasks?: () => number;
  /** The store host only: its pulls from the model hub. */
  readonly pulls?: () => readonly Pull[];
  /** Each finished request, as the counters saw it (the dashboard's series). */
  readonly onRequest?: (o: RequestOutcome) => void;
}

const SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384];
const TELEMETRY_OUTCOMES = [
  "offered",
  "admitted",
  "rejected",
  "coalesced",
  "dropped",
  "published",
] as const;

export class NodeMetrics {
  private readonly node = new Registry();
  private readonly master = new Registry();
  private readonly requests: Counter<"model" | "status" | "code">;
  private readonly duration: Histogram<"model" | "status">;
  private readonly ttft: Histogram<"model">;
  private readonly promptTokens: Counter<"model">;
  private readonly completionTokens: Counter<"model">;
  private readonly completionPerRequest: Histogram<"model">;
  private readonly generationSpeed: Histogram<"model">;
  private readonly inFlight: Gauge;
  private readonly tokenRequests: Counter<"token" | "code">;
  private readonly retries: Counter<"model" | "code">;
  private readonly migrations: Counter<"model" | "outcome">;
  private readonly migrationDuration: Histogram<"model">;
  private readonly tokenTokens: Counter<"token">;
  private scraping: Promise<string> | undefined;

  constructor(private readonly o: MetricsSources) {
    const node = this.node;
    node.setDefaultLabels({ node: o.name });
    collectDefaultMetrics({ register: node });
    this.requests = new Counter({
      name: "ic_chat_requests_total",
      help: "Chat completion requests this node answered, by model, HTTP status and error code (ok when none).",
      labelNames: ["model", "status", "code"],
      registers: [node],
    });
    this.duration = new Histogram({
      name: "ic_chat_request_duration_seconds",
      help: "Chat completion requests from arrival to their last byte.",
      labelNames: ["model", "status"],
      buckets: SECONDS,
      registers: [node],
    });
    this.ttft = new Histogram({
      name: "ic_chat_time_to_first_token_seconds",
      help: "Arrival to the first token: the first chunk of a stream; for a non-streaming request, reaching the engine plus its prompt time.",
      labelNames: ["model"],
      buckets: SECONDS,
      registers: [node],
    });
    this.promptTokens = new Counter({
      name: "ic_chat_prompt_tokens_total",
      help: "Prompt tokens of answered chat requests (the engine's count).",
      labelNames: ["model"],
      registers: [node],
    });
    this.completionTokens = new Counter({
      name: "ic_chat_completion_tokens_total",
      help: "Generated tokens of answered chat requests (the engine's count).",
      labelNames: ["model"],
      registers: [node],
    });
    this.completionPerRequest = new Histogram({
      name: "ic_chat_completion_tokens",
      help: "Generated tokens per answered chat request.",
      labelNames: ["model"],
      buckets: TOKENS,
      registers: [node],
    });
    this.generationSpeed = new Histogram({
      name: "ic_chat_generation_tokens_per_second",
      help: "Decode speed of answered chat requests (the engine's timings).",
      labelNames: ["model"],
      buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000],
      registers: [node],
    });
    this.retries = new Counter({
      name: "ic_chat_retries_total",
      help: "Chat requests retried on another ready instance after theirs was lost before the client got a byte, by the loss's code.",
      labelNames: ["model", "code"],
      registers: [node],
    });
    this.migrations = new Counter({
      name: "ic_chat_migrations_total",
      help: "Chat streams that lost their instance after their first byte and had opted in to migration, by outcome (migrated, no_instance, not_continuable, failed).",
      labelNames: ["model", "outcome"],
      registers: [node],
    });
    this.migrationDuration = new Histogram({
      name: "ic_chat_migration_seconds",
      help: "Migrated chat streams: from the loss of their instance to the first event of the continuation relayed to the client.",
      labelNames: ["model"],
      buckets: SECONDS,
      registers: [node],
    });
    this.tokenRequests = new Counter({
      name: "ic_token_requests_total",
      help: "Chat requests by API token name and error code (ok when none; rate_limited: over one of its limits, forbidden: a model it may not use).",
      labelNames: ["token", "code"],
      registers: [node],
    });
    this.tokenTokens = new Counter({
      name: "ic_token_tokens_total",
      help: "Prompt plus generated tokens of answered chat requests, by API token name.",
      labelNames: ["token"],
      registers: [node],
    });
    this.inFlight = new Gauge({
      name: "ic_chat_requests_in_flight",
      help: "Chat completion requests this node is answering now.",
      registers: [node],
    });
    this.nodeGauges();
    this.processGauges();
    this.clusterGauges();
  }

  readonly contentType = Registry.PROMETHEUS_CONTENT_TYPE;

  /** The per-request observer for the chat path (chatObservers in node.ts). */
  observe(r: { commandId: string; receivedAt: number }): ChatObserver {
    this.inFlight.inc();
    let model = "none";
    let token: string | undefined;
    let sentAt: number | undefined;
    let firstChunkAt: number | undefined;
    let engine: Extract<ChatEvent, { type: "engine" }> | undefined;
    let ended = false;
    return {
      event: (e) => {
        switch (e.type) {
          case "validated":
            model = this.knownModel(e.model) ? e.model : "unknown";
            token = e.token;
            break;
          case "sent":
            sentAt = e.at;
            break;
          case "first_chunk":
            firstChunkAt = e.at;
            break;
          case "engine":
            engine = e;
            break;
          case "retry":
            this.retries.inc({ model, code: e.code });
            break;
          case "end": {
            if (ended) return;
            ended = true;
            this.inFlight.dec();
            const status = String(e.status);
            this.requests.inc({ model, status, code: e.code ?? "ok" });
            if (token !== undefined) this.tokenRequests.inc({ token, code: e.code ?? "ok" });
            this.duration.observe({ model, status }, Math.max(0, e.at - r.receivedAt) / 1000);
            if (!e.ok) {
              this.o.onRequest?.({ status: e.status });
              return;
            }
            const t = engine?.timings;
            const ttftMs =
              firstChunkAt !== undefined
                ? firstChunkAt - r.receivedAt
                : sentAt !== undefined && t?.prompt_ms !== undefined
                  ? sentAt - r.receivedAt + t.prompt_ms
                  : undefined;
            this.o.onRequest?.({
              status: e.status,
              ttftMs: ttftMs === undefined ? undefined : Math.max(0, ttftMs),
              completionTokens: engine?.usage?.completion_tokens ?? t?.predicted_n,
            });
            if (ttftMs !== undefined) this.ttft.observe({ model }, Math.max(0, ttftMs) / 1000);
            this.tokens(model, t, engine?.usage);
            if (token !== undefined) {
              const u = engine?.usage;
              const used =
                (u?.prompt_tokens ?? t?.prompt_n ?? 0) +
                (u?.completion_tokens ?? t?.predicted_n ?? 0);
              if (used > 0) this.tokenTokens.inc({ token }, used);
            }
            break;
          }
          default:
            break;
        }
      },
    };
  }

  /** One stream migration (the gateway's onMigration): counted by outcome, timed when it worked. */
  migration(m: { model: string; outcome: string; seconds: number }): void {
    const model = this.knownModel(m.model) ? m.model : "unknown";
    this.migrations.inc({ model, outcome: m.outcome });
    if (m.outcome === "migrated") this.migrationDuration.observe({ model }, m.seconds);
  }

  private tokens(
    model: string,
    t: EngineTimings | undefined,
    usage: { prompt_tokens?: number; completion_tokens?: number } | undefined,
  ): void {
    const prompt = usage?.prompt_tokens ?? t?.prompt_n;
    const completion = usage?.completion_tokens ?? t?.predicted_n;
    if (prompt !== undefined && prompt >= 0) this.promptTokens.inc({ model }, prompt);
    if (completion !== undefined && completion >= 0) {
      this.completionTokens.inc({ model }, completion);
      this.completionPerRequest.observe({ model }, completion);
    }
    if (t?.predicted_n && t.predicted_ms && t.predicted_ms > 0)
      this.generationSpeed.observe({ model }, (t.predicted_n * 1000) / t.predicted_ms);
  }

  private knownModel(model: string): boolean {
    const s = this.o.cluster.snapshot();
    return (
      Object.hasOwn(s.models, model) ||
      Object.values(s.instances).some((i) => i.model_id === model) ||
      Object.values(s.deployments).some((d) => d.model_id === model)
    );
  }

  /** The whole exposition: node, cluster (on the master) and the local engines'. */
  async render(): Promise<string> {
    const [own, cluster, engines] = await Promise.all([
      this.node.metrics(),
      this.o.cluster.isMaster ? this.master.metrics() : Promise.resolve(""),
      this.scrapeRunners(),
    ]);
    return own + cluster + engines;
  }

  // ---- process: bus sends and the process guard ----

  private processGauges(): void {
    const o = this.o;
    const registers = [this.node];
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

  // ---- node ----

  private nodeGauges(): void {
    const o = this.o;
    const registers = [this.node];
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
    new Gauge({
      name: "ic_store_pull_bytes",
      help: "The store host's pulls from the model hub: bytes fetched so far, by model and state.",
      labelNames: ["model", "state"],
      registers,
      collect() {
        this.reset();
        for (const p of o.pulls?.() ?? [])
          this.set({ model: p.model_id, state: p.state }, p.bytes_done);
      },
    });
    new Gauge({
      name: "ic_store_pull_total_bytes",
      help: "The size of each pull from the model hub, once known.",
      labelNames: ["model"],
      registers,
      collect() {
        this.reset();
        for (const p of o.pulls?.() ?? [])
          if (p.bytes_total !== null) this.set({ model: p.model_id }, p.bytes_total);
      },
    });
    new Gauge({
      name: "ic_node_staging_bytes",
      help: "Bytes of staged model copies under node_cache_path.",
      registers,
      async collect() {
        this.reset();
        this.set((await o.staging()).bytes);
      },
    });
    new Gauge({
      name: "ic_node_staged_models",
      help: "Staged model copies under node_cache_path.",
      registers,
      async collect() {
        this.reset();
        this.set((await o.staging()).models);
      },
    });
    new Gauge({
      name: "ic_node_event_log_mode",
      help: "Event-log persistence mode (1 for the current one): normal, or counting-only when disk is short.",
      labelNames: ["mode"],
      registers,
      collect() {
        this.reset();
        const mode = o.eventLog().mode;
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
        this.set(o.eventLog().bytes);
      },
    });
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

  // ---- cluster (rendered on the master only) ----

  private clusterGauges(): void {
    const o = this.o;
    const registers = [this.master];
    this.master.setDefaultLabels({ node: o.name });
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

  // ---- local engines ----

  /** Concurrent scrapes of /metrics share one round of engine scrapes. */
  private scrapeRunners(): Promise<string> {
    this.scraping ??= this.scrapeOnce().finally(() => (this.scraping = undefined));
    return this.scraping;
  }

  private async scrapeOnce(): Promise<string> {
    const snap = this.o.cluster.snapshot();
    const targets = this.o
      .runners()
      .filter((r) => r.rank === 0 && r.state === "RunnerReady" && r.endpoint?.startsWith("http"));
    const timeoutMs = this.o.scrapeTimeoutMs ?? 2000;
    const results = await Promise.all(
      targets.map(async (r) => {
        const labels: [string, string][] = [
          ["node", this.o.name],
          ["model", snap.instances[r.instance_id]?.model_id ?? "unknown"],
          ["ic_instance", r.instance_id],
          ["rank", String(r.rank)],
        ];
        const started = performance.now();
        const headers = this.o.engineHeaders(r.instance_id);
        // KV-cache use is not in the engine's /metrics: its /slots says what each slot holds.
        const kv = fetch(`${r.endpoint}/slots`, { headers, signal: AbortSignal.timeout(timeoutMs) })
          .then(async (res) => (res.ok ? kvCacheUse(await res.json()) : undefined))
          .catch(() => undefined);
        let families: PromFamily[] = [];
        try {
          const res = await fetch(`${r.endpoint}/metrics`, {
            headers,
            signal: AbortSignal.timeout(timeoutMs),
          });
          const text = await res.text();
          if (!res.ok) throw new Error(`HTTP ${res.status}: ${text.slice(0, 200)}`);
          families = parseExposition(text);
        } catch (e) {
          this.o.log.debug({ err: e, instance: r.instance_id }, "engine metrics scrape failed");
          return { labels, families, up: 0, seconds: since(started), kv: await kv };
        }
        return { labels, families, up: 1, seconds: since(started), kv: await kv };
      }),
    );
    const meta: PromFamily[] = [
      {
        name: "ic_runner_scrape_up",
        help: "Whether the last scrape of a local llama-server's /metrics succeeded.",
        type: "gauge",
        samples: results.map((r) => ({
          name: "ic_runner_scrape_up",
          labels: r.labels,
          value: String(r.up),
          timestamp: undefined,
        })),
      },
      {
        name: "ic_runner_scrape_duration_seconds",
        help: "How long the last scrape of a local llama-server's /metrics took.",
        type: "gauge",
        samples: results.map((r) => ({
          name: "ic_runner_scrape_duration_seconds",
          labels: r.labels,
          value: String(r.seconds),
          timestamp: undefined,
        })),
      },
    ];
    const withKv = results.filter((r) => r.kv !== undefined);
    const kvFamily = (
      name: string,
      help: string,
      value: (k: KvCacheUse) => number,
    ): PromFamily => ({
      name,
      help,
      type: "gauge",
      samples: withKv.map((r) => ({
        name,
        labels: r.labels,
        value: String(value(r.kv!)),
        timestamp: undefined,
      })),
    });
    meta.push(
      kvFamily(
        "ic_engine_kv_cache_tokens",
        "Tokens held in a local llama-server's KV cache, over its slots (from its /slots).",
        (k) => k.tokens,
      ),
      kvFamily(
        "ic_engine_kv_cache_capacity_tokens",
        "Tokens a local llama-server's KV cache holds at most (the context of its slots).",
        (k) => k.capacity,
      ),
      kvFamily(
        "ic_engine_kv_cache_usage_ratio",
        "KV-cache use of a local llama-server: held tokens over capacity (0 to 1).",
        (k) => (k.capacity > 0 ? k.tokens / k.capacity : 0),
      ),
    );
    return renderFamilies([...meta.filter((f) => f.samples.length > 0), ...mergeFamilies(results)]);
  }
}

const since = (startedMs: number): number => (performance.now() - startedMs) / 1000;

export interface KvCacheUse {
  readonly tokens: number;
  readonly capacity: number;
}

/**
 * KV-cache use from llama-server's GET /slots: each slot's context (`n_ctx`) and the tokens it holds
 * (`n_prompt_tokens`, the cached sequence of its current or last task). Undefined for an answer of
 * another shape. Pure.
 */
export function kvCacheUse(slots: unknown): KvCacheUse | undefined {
  if (!Array.isArray(slots)) return undefined;
  let tokens = 0;
  let capacity = 0;
  for (const s of slots as unknown[]) {
    const slot = s as { n_ctx?: unknown; n_prompt_tokens?: unknown };
    if (typeof slot.n_ctx !== "number") return undefined;
    capacity += slot.n_ctx;
    if (typeof slot.n_prompt_tokens === "number")
      tokens += Math.min(slot.n_prompt_tokens, slot.n_ctx);
  }
  return { tokens, capacity };
}
