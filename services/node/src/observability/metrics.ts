// GET /metrics: this node in the Prometheus text format (prom-client). The node's own gauges, what
// each component declares in the node's registry (Component.metrics: readings, runners and the
// telemetry path, staging, the event log, the store host's pulls), chat request counters
// and histograms by model and status (fed by a ChatObserver), on the master the cluster gauges, and
// every local llama-server's own /metrics re-exported with model, instance and rank labels.
// Label values are bounded: a chat request for a model the cluster does not know is labelled
// `unknown`, so clients cannot grow the series without bound.
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { ChatEvent, ChatObserver, ChatRequestSeen, EngineTimings } from "@ic/protocol";
import type { ClusterView } from "@ic/protocol";
import type { Logger } from "@ic/log";
import type { RunnerState } from "@ic/protocol";
import type { BusSendStats } from "@ic/bus";
import { mergeFamilies, parseExposition, renderFamilies } from "./prom-text.ts";
import type { PromFamily } from "./prom-text.ts";
import type { RequestOutcome } from "./series.ts";
import { clusterGauges, nodeGauges } from "./gauges.ts";

/** A runner of this node, as the worker reports it (its engine's /metrics are re-exported). */
export interface LocalRunnerView {
  readonly instance_id: string;
  readonly rank: number;
  readonly state: RunnerState;
  readonly endpoint?: string;
}

export interface MetricsSources {
  readonly name: string;
  readonly peerKey: string;
  readonly cluster: ClusterView;
  readonly log: Logger;
  readonly runners: () => readonly LocalRunnerView[];
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
  /** Each finished request, as the counters saw it (the dashboard's series). */
  readonly onRequest?: (o: RequestOutcome) => void;
}

const SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384];

export class NodeMetrics {
  private readonly node = new Registry();
  private readonly master = new Registry();
  private readonly requests: Counter<"model" | "status" | "code" | "endpoint">;
  private readonly duration: Histogram<"model" | "status" | "endpoint">;
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
      help: "Inference requests this node answered (chat, completions, responses, messages, embeddings, rerank, token counts), by model, HTTP status, error code (ok when none) and endpoint path.",
      labelNames: ["model", "status", "code", "endpoint"],
      registers: [node],
    });
    this.duration = new Histogram({
      name: "ic_chat_request_duration_seconds",
      help: "Inference requests from arrival to their last byte, by model, HTTP status and endpoint path.",
      labelNames: ["model", "status", "endpoint"],
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
    nodeGauges(this.node, o);
    clusterGauges(this.master, o);
  }

  readonly contentType = Registry.PROMETHEUS_CONTENT_TYPE;

  /** The per-request observer for the chat path (chatObservers in node.ts). */
  observe(r: ChatRequestSeen): ChatObserver {
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
            const endpoint = r.path;
            this.requests.inc({ model, status, code: e.code ?? "ok", endpoint });
            if (token !== undefined) this.tokenRequests.inc({ token, code: e.code ?? "ok" });
            this.duration.observe(
              { model, status, endpoint },
              Math.max(0, e.at - r.receivedAt) / 1000,
            );
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

  /** The node's registry: the components declare their own metrics in it (Component.metrics). */
  get registry(): Registry {
    return this.node;
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
      targets.map((r) =>
        scrapeRunner(this.o, r, snap.instances[r.instance_id]?.model_id ?? "unknown", timeoutMs),
      ),
    );
    const meta = scrapeFamilies(results);
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

/** One scrape of a rank-0 engine: its /metrics families, whether it answered, and its KV-cache use. */
async function scrapeRunner(
  o: Pick<MetricsSources, "name" | "engineHeaders" | "log">,
  r: LocalRunnerView,
  model: string,
  timeoutMs: number,
): Promise<ScrapeResult> {
  const labels: [string, string][] = [
    ["node", o.name],
    ["model", model],
    ["ic_instance", r.instance_id],
    ["rank", String(r.rank)],
  ];
  const started = performance.now();
  const headers = o.engineHeaders(r.instance_id);
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
    o.log.debug({ err: e, instance: r.instance_id }, "engine metrics scrape failed");
    return { labels, families, up: 0, seconds: since(started), kv: await kv };
  }
  return { labels, families, up: 1, seconds: since(started), kv: await kv };
}

interface ScrapeResult {
  readonly labels: [string, string][];
  readonly families: PromFamily[];
  readonly up: number;
  readonly seconds: number;
  readonly kv: KvCacheUse | undefined;
}

/** The scrape's own families: whether each engine answered, how long it took, its KV-cache use. */
function scrapeFamilies(results: readonly ScrapeResult[]): PromFamily[] {
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
  const kvFamily = (name: string, help: string, value: (k: KvCacheUse) => number): PromFamily => ({
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
  return meta;
}
