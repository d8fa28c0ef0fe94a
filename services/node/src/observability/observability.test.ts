// The observability endpoints wired as node.ts wires them (gateway app, tokens, one extension), over a
// scripted cluster, a real telemetry collector with a scripted reading, a scripted llama-server for
// its /metrics, and runner log files in temp directories.
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import type { ParsedFamily } from "parse-prometheus-text-format";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createNodeApp, routesOf } from "@ic/http";
import type { ClusterView, PeerView } from "@ic/protocol";
import type { ChatObserver } from "@ic/protocol";
import { createLogger, LogTail, silentLogger } from "@ic/log";
import { emptyState, ServiceError, TelemetryDiagnosticsSchema } from "@ic/protocol";
import type {
  ControlEvent,
  ControlState,
  IndexedEvent,
  InstanceId,
  ModelId,
  NodeId,
  Pull,
  SessionId,
  Telemetry,
} from "@ic/protocol";
import { runnerMetrics, TelemetryCollector, telemetryMetrics, telemetryRoutes } from "@ic/worker";
import { pullMetrics, stagingMetrics } from "@ic/store";
import type { StagedEntry } from "@ic/store";
import { kvCacheUse, NodeMetrics } from "./metrics.ts";
import { parseExposition } from "./prom-text.ts";
import type { LocalRunnerView, MetricsSources } from "./metrics.ts";
import { observabilityRoutes } from "./routes.ts";
import { readRunnerLog } from "./runner-logs.ts";
import type { RunnerLogSource } from "./runner-logs.ts";

const S = "s-obs" as SessionId;
const A = "n-a" as NodeId;
const B = "n-b" as NodeId;
const MODEL = "org/tiny" as ModelId;
const INST = "i-1" as InstanceId;
const TOKENS = {
  read: "read-token-0123456789",
  inference: "inference-token-0123456789",
};

const telemetry: Telemetry = {
  memory_total_bytes: 64e9,
  memory_free_bytes: 48e9,
  gpus: [{ vendor: "NVIDIA", model: "H100", vram_total_bytes: 80e9, vram_free_bytes: 70e9 }],
  disk_free_bytes: 500e9,
  engine: { server_bin: "/e", rpc_bin: "/r", backend: "cuda", usable: true, overridden: false },
  declared_backend: "auto",
};

function state(): ControlState {
  const s = emptyState();
  s.session = {
    session_id: S,
    master_node_id: A,
    master_peer_key: "p-a",
    master_started_at: 0,
    started_at: 1_700_000_000_000,
  };
  s.index = 7;
  for (const [id, peer, name] of [
    [A, "p-a", "node-a"],
    [B, "p-b", "node-b"],
  ] as const)
    s.members[id] = {
      node_id: id,
      peer_key: peer,
      name,
      api_url: "",
      host: "",
      started_at: 0,
      joined_at: 0,
    };
  s.models[MODEL] = {
    model_id: MODEL,
    file: "tiny.gguf",
    bytes: 1000,
    architecture: "llama",
    layers: 4,
    context_length: 2048,
    embedding_length: 64,
    head_count: 4,
    head_count_kv: 2,
    supports_tensor: true,
  };
  s.instances[INST] = {
    instance_id: INST,
    model_id: MODEL,
    sharding: "Pipeline",
    created_at: 0,
    assignments: [
      { node_id: A, peer_key: "p-a", rank: 0, layers: 2, weight_bytes: 500, required_bytes: 600 },
      { node_id: B, peer_key: "p-b", rank: 1, layers: 2, weight_bytes: 500, required_bytes: 600 },
    ],
  };
  s.runners[`${INST}/0`] = {
    instance_id: INST,
    node_id: A,
    rank: 0,
    state: "RunnerReady",
    restarts: 0,
    since: 0,
  };
  s.runners[`${INST}/1`] = {
    instance_id: INST,
    node_id: B,
    rank: 1,
    state: "RunnerReady",
    restarts: 0,
    since: 0,
  };
  s.deployments["d-1"] = {
    deployment_id: "d-1",
    model_id: MODEL,
    min_nodes: 2,
    sharding: "Pipeline",
    excluded_peer_keys: [],
    created_at: 0,
    instance_id: INST,
    status: "Placed",
  };
  return s;
}

function cluster(isMaster = true): ClusterView {
  const s = state();
  const peers: PeerView[] = [];
  return {
    peerKey: "p-a",
    synced: true,
    isMaster,
    sessionId: S,
    nodeId: A,
    snapshot: () => s,
    livePeers: () => peers,
    command: () => Promise.reject(new Error("no commands here")),
    on: () => () => {},
  };
}

/** A llama-server's /metrics: needs the instance's key, like the real one. */
async function fakeEngine(): Promise<{ url: string; scrapes: number; close(): Promise<void> }> {
  const out = { url: "", scrapes: 0, close: async () => {} };
  const server: Server = createServer((req, res) => {
    if (req.headers.authorization !== `Bearer key-${INST}`) {
      res.writeHead(401).end('{"error":{"code":401,"message":"Invalid API Key"}}');
      return;
    }
    if (req.url === "/slots") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify([{ id: 0, n_ctx: 256, n_prompt_tokens: 64 }]));
      return;
    }
    out.scrapes++;
    res.writeHead(200, { "content-type": "text/plain; version=0.0.4" });
    res.end(`# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total ${14 * out.scrapes}
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
`);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  out.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  out.close = () => new Promise((r) => server.close(() => r()));
  return out;
}

function sources(view: ClusterView, runners: LocalRunnerView[]): MetricsSources {
  return {
    name: "node-a",
    peerKey: "p-a",
    cluster: view,
    log: silentLogger(),
    runners: () => runners,
    engineHeaders: (id) => ({ authorization: `Bearer key-${id}` }),
    scrapeTimeoutMs: 1000,
    // The master's task table holds one open task.
    openTasks: () => 1,
  };
}

async function collector(): Promise<TelemetryCollector> {
  const c = new TelemetryCollector(
    {
      log: silentLogger(),
      engine: () => telemetry.engine,
      declaredBackend: "auto",
      modelsPath: tmpdir(),
      intervalMs: 2000,
    },
    async () => ({ telemetry, health: [] }),
  );
  await c.read();
  return c;
}

function family(fams: ParsedFamily[], name: string): ParsedFamily {
  const f = fams.find((x) => x.name === name);
  if (!f) throw new Error(`no family ${name} in ${fams.map((x) => x.name).join(", ")}`);
  return f;
}
const valueOf = (fams: ParsedFamily[], name: string, labels: Record<string, string> = {}) =>
  Number(
    family(fams, name).metrics.find((m) =>
      Object.entries(labels).every(([k, v]) => m.labels?.[k] === v),
    )?.value,
  );

/**
 * A labelled histogram's count, sum and buckets. The text parser flattens labelled histograms (it
 * keeps only unlabelled ones whole), so these are read from the samples by name after it validated
 * the page.
 */
function histogram(text: string, name: string, labels: Record<string, string>) {
  const samples = parseExposition(text)
    .find((f) => f.name === name)!
    .samples.filter((x) =>
      Object.entries(labels).every(([k, v]) => x.labels.some((l) => l[0] === k && l[1] === v)),
    );
  const one = (suffix: string) => Number(samples.find((x) => x.name === `${name}${suffix}`)?.value);
  const buckets = new Map(
    samples
      .filter((x) => x.name === `${name}_bucket`)
      .map((x) => [x.labels.find((l) => l[0] === "le")![1], Number(x.value)] as const),
  );
  return { count: one("_count"), sum: one("_sum"), buckets };
}

/** Plays one request through an observer as chat.ts would. */
function play(obs: ChatObserver, t0: number, kind: "stream" | "plain" | "404" | "invalid") {
  const at = (ms: number) => t0 + ms;
  if (kind === "invalid") {
    obs.event({
      type: "end",
      at: at(1),
      ok: false,
      status: 400,
      code: "invalid_request",
      message: "",
    });
    return;
  }
  obs.event({
    type: "validated",
    at: at(1),
    model: kind === "404" ? "nobody/ever" : MODEL,
    stream: kind === "stream",
  });
  if (kind === "404") {
    obs.event({
      type: "end",
      at: at(2),
      ok: false,
      status: 404,
      code: "model_not_found",
      message: "",
    });
    return;
  }
  obs.event({ type: "sent", at: at(5) });
  obs.event({ type: "headers", at: at(10), status: 200 });
  if (kind === "stream") obs.event({ type: "first_chunk", at: at(40) });
  obs.event({
    type: "engine",
    at: at(90),
    timings: { prompt_n: 7, prompt_ms: 20, predicted_n: 16, predicted_ms: 80 },
    usage: kind === "plain" ? { prompt_tokens: 7, completion_tokens: 16 } : undefined,
  });
  obs.event({
    type: "end",
    at: at(100),
    ok: true,
    status: 200,
    code: undefined,
    message: undefined,
  });
}

describe("GET /metrics", () => {
  let engine: Awaited<ReturnType<typeof fakeEngine>>;
  beforeAll(async () => {
    engine = await fakeEngine();
  });
  afterAll(async () => {
    await engine.close();
  });

  it("parses as Prometheus text; request counters, latencies and tokens move with chat requests", async () => {
    const m = new NodeMetrics(sources(cluster(), []));
    const before = parsePrometheusTextFormat(await m.render());
    expect(valueOf(before, "ic_chat_requests_in_flight")).toBe(0);
    expect(family(before, "ic_chat_requests_total").metrics).toEqual([]);

    const t0 = 1_000_000;
    play(
      m.observe({ commandId: "c-1", receivedAt: t0, path: "/v1/chat/completions" }),
      t0,
      "stream",
    );
    play(
      m.observe({ commandId: "c-2", receivedAt: t0, path: "/v1/chat/completions" }),
      t0,
      "plain",
    );
    play(m.observe({ commandId: "c-3", receivedAt: t0, path: "/v1/chat/completions" }), t0, "404");
    play(
      m.observe({ commandId: "c-4", receivedAt: t0, path: "/v1/chat/completions" }),
      t0,
      "invalid",
    );
    const open = m.observe({ commandId: "c-5", receivedAt: t0, path: "/v1/chat/completions" });

    const text = await m.render();
    const fams = parsePrometheusTextFormat(text);
    // Every family once (the format requires a family's samples together).
    expect(new Set(fams.map((f) => f.name)).size).toBe(fams.length);
    expect(
      valueOf(fams, "ic_chat_requests_total", { model: MODEL, status: "200", code: "ok" }),
    ).toBe(2);
    // A model the cluster does not know is never a label value of its own.
    expect(
      valueOf(fams, "ic_chat_requests_total", {
        model: "unknown",
        status: "404",
        code: "model_not_found",
      }),
    ).toBe(1);
    expect(valueOf(fams, "ic_chat_requests_total", { model: "none", status: "400" })).toBe(1);
    expect(text).not.toContain("nobody/ever");
    expect(valueOf(fams, "ic_chat_requests_in_flight")).toBe(1);
    const duration = histogram(text, "ic_chat_request_duration_seconds", {
      model: MODEL,
      status: "200",
    });
    expect(duration.count).toBe(2);
    expect(duration.sum).toBeCloseTo(0.2);
    // Stream: first chunk at 40 ms; non-streaming: sent at 5 ms + the engine's 20 ms of prompt.
    const ttft = histogram(text, "ic_chat_time_to_first_token_seconds", { model: MODEL });
    expect(ttft.count).toBe(2);
    expect(ttft.sum).toBeCloseTo(0.065);
    expect(ttft.buckets.get("0.05")).toBe(2);
    expect(ttft.buckets.get("0.025")).toBe(1);
    expect(ttft.buckets.get("0.01")).toBe(0);
    expect(valueOf(fams, "ic_chat_prompt_tokens_total", { model: MODEL })).toBe(14);
    expect(valueOf(fams, "ic_chat_completion_tokens_total", { model: MODEL })).toBe(32);
    expect(histogram(text, "ic_chat_generation_tokens_per_second", { model: MODEL }).count).toBe(2);
    expect(histogram(text, "ic_chat_completion_tokens", { model: MODEL }).sum).toBe(32);
    play(open, t0, "stream");
    const after = parsePrometheusTextFormat(await m.render());
    expect(valueOf(after, "ic_chat_requests_total", { model: MODEL, code: "ok" })).toBe(3);
    expect(valueOf(after, "ic_chat_requests_in_flight")).toBe(0);
  });

  it("labels a chat for a model named like Object.prototype's keys `unknown`", async () => {
    const m = new NodeMetrics(sources(cluster(), []));
    for (const model of ["constructor", "toString", "__proto__"]) {
      const obs = m.observe({
        commandId: `c-${model}`,
        receivedAt: 0,
        path: "/v1/chat/completions",
      });
      obs.event({ type: "validated", at: 1, model, stream: false });
      obs.event({
        type: "end",
        at: 2,
        ok: false,
        status: 404,
        code: "model_not_found",
        message: "",
      });
    }
    const fams = parsePrometheusTextFormat(await m.render());
    const models = family(fams, "ic_chat_requests_total").metrics.map(
      (x) => (x as { labels: Record<string, string> }).labels.model,
    );
    expect(models).toEqual(["unknown"]);
  });

  it("has what the components declare in its registry, with the node's labels: readings, runners by state, the telemetry path, staging", async () => {
    const c = await collector();
    const m = new NodeMetrics(sources(cluster(), []));
    // The worker's and the store's metrics, declared in the node's registry as their components
    // declare them (Component.metrics), get the node's labels (each has its own tests too).
    telemetryMetrics(m.registry, c, { node: "node-a", peer_key: "p-a" });
    runnerMetrics(m.registry, () => [
      { instance_id: INST, model_id: MODEL, rank: 0, state: "RunnerReady", restarts: 0 },
      { instance_id: "i-2", model_id: MODEL, rank: 1, state: "RunnerWarmingUp", restarts: 0 },
    ]);
    const staged = [{ bytes: 1234 }] as StagedEntry[];
    stagingMetrics(m.registry, {
      staging: () => ({
        list: async () => staged,
        counters: { from_store_bytes: 300, from_peers_bytes: 700 },
      }),
      peerServe: { bytes_served: 900, range_requests: 3 },
    });
    const fams = parsePrometheusTextFormat(await m.render());
    expect(valueOf(fams, "ic_node_memory_free_bytes", { node: "node-a" })).toBe(48e9);
    expect(valueOf(fams, "ic_node_memory_total_bytes")).toBe(64e9);
    expect(valueOf(fams, "ic_node_disk_free_bytes")).toBe(500e9);
    expect(valueOf(fams, "ic_node_gpus")).toBe(1);
    expect(valueOf(fams, "ic_node_gpu_memory_free_bytes", { gpu: "0", gpu_model: "H100" })).toBe(
      70e9,
    );
    expect(valueOf(fams, "ic_node_runners", { state: "RunnerReady" })).toBe(1);
    expect(valueOf(fams, "ic_node_runners", { state: "RunnerWarmingUp" })).toBe(1);
    expect(valueOf(fams, "ic_node_runners", { state: "RunnerFailed" })).toBe(0);
    expect(valueOf(fams, "ic_node_staging_bytes", { node: "node-a" })).toBe(1234);
    expect(valueOf(fams, "ic_node_staged_models")).toBe(1);
    expect(valueOf(fams, "ic_staging_received_bytes_total", { source: "store" })).toBe(300);
    expect(valueOf(fams, "ic_staging_received_bytes_total", { source: "peers" })).toBe(700);
    expect(valueOf(fams, "ic_staging_served_to_peers_bytes_total")).toBe(900);
    expect(
      valueOf(fams, "ic_telemetry_samples_total", { kind: "readings", outcome: "admitted" }),
    ).toBe(1);
    expect(valueOf(fams, "ic_telemetry_queue_depth")).toBe(2);
    expect(family(fams, "process_cpu_user_seconds_total").type).toBe("COUNTER");
  });

  it("re-exports each local llama-server's metrics with model, ic_instance and rank labels", async () => {
    const runners: LocalRunnerView[] = [
      { instance_id: INST, rank: 0, state: "RunnerReady", endpoint: engine.url },
      // A rank-0 engine that does not answer: scrape_up 0, the rest of the page unaffected.
      { instance_id: "i-dead", rank: 0, state: "RunnerReady", endpoint: "http://127.0.0.1:1" },
      // Not ready, or an rpc rank: not scraped.
      { instance_id: "i-3", rank: 0, state: "RunnerWarmingUp", endpoint: engine.url },
      { instance_id: INST, rank: 1, state: "RunnerReady", endpoint: "127.0.0.1:5000" },
    ];
    const m = new NodeMetrics(sources(cluster(), runners));
    const fams = parsePrometheusTextFormat(await m.render());
    // `ic_instance`: Prometheus keeps `instance` for the scrape target.
    const labels = { model: MODEL, ic_instance: INST, rank: "0", node: "node-a" };
    expect(family(fams, "llamacpp:prompt_tokens_total").type).toBe("COUNTER");
    expect(family(fams, "llamacpp:prompt_tokens_total").metrics).toEqual([
      { labels, value: String(14 * engine.scrapes) },
    ]);
    expect(valueOf(fams, "llamacpp:requests_processing", { ic_instance: INST })).toBe(1);
    expect(valueOf(fams, "ic_runner_scrape_up", { ic_instance: INST })).toBe(1);
    expect(valueOf(fams, "ic_runner_scrape_up", { ic_instance: "i-dead", model: "unknown" })).toBe(
      0,
    );
    expect(family(fams, "ic_runner_scrape_up").metrics).toHaveLength(2);
    // Concurrent scrapes of /metrics share one round of engine scrapes.
    const n = engine.scrapes;
    await Promise.all([m.render(), m.render(), m.render()]);
    expect(engine.scrapes).toBe(n + 1);
  });

  it("has the store host's pulls, as its component declares them", async () => {
    const pulls = [
      {
        model_id: "acme/x",
        state: "running",
        bytes_done: 42,
        bytes_total: 100,
      },
    ] as unknown as Pull[];
    const m = new NodeMetrics(sources(cluster(), []));
    pullMetrics(m.registry, { list: () => pulls });
    const fams = parsePrometheusTextFormat(await m.render());
    expect(valueOf(fams, "ic_store_pull_bytes", { model: "acme/x", state: "running" })).toBe(42);
    expect(valueOf(fams, "ic_store_pull_total_bytes", { model: "acme/x" })).toBe(100);
  });

  it("has the cluster gauges on the master only", async () => {
    const master = parsePrometheusTextFormat(
      await new NodeMetrics(sources(cluster(true), [])).render(),
    );
    expect(valueOf(master, "ic_cluster_members")).toBe(2);
    expect(valueOf(master, "ic_cluster_instances", { ready: "true" })).toBe(1);
    expect(valueOf(master, "ic_cluster_deployments", { status: "Placed" })).toBe(1);
    expect(valueOf(master, "ic_cluster_deployments", { status: "Pending" })).toBe(0);
    expect(valueOf(master, "ic_cluster_tasks_in_flight")).toBe(1);
    expect(valueOf(master, "ic_cluster_session_info", { session_id: S, master_node_id: A })).toBe(
      1,
    );
    expect(valueOf(master, "ic_cluster_session_started_seconds")).toBe(1_700_000_000);
    const follower = parsePrometheusTextFormat(
      await new NodeMetrics(sources(cluster(false), [])).render(),
    );
    expect(follower.some((f) => f.name.startsWith("ic_cluster_"))).toBe(false);
  });

  it("counts on-demand loads and unloads by why, from the events every node applies", async () => {
    const view = cluster(false);
    let listener: ((ev: IndexedEvent, s: ControlState) => void) | undefined;
    view.on = (l) => {
      listener = l.event;
      return () => {};
    };
    const metrics = new NodeMetrics(sources(view, []));
    const s = view.snapshot();
    const dep = Object.values(s.deployments)[0]!;
    const at = (event: ControlEvent, index: number): IndexedEvent => ({
      index,
      session_id: S,
      at: 0,
      event,
    });
    const deleted = (cause?: "idle" | "room" | "scale_down"): ControlEvent => ({
      type: "DeploymentDeleted",
      deployment_id: "d",
      reason: "x",
      ...(cause ? { cause } : {}),
    });
    listener!(at({ type: "DeploymentCreated", deployment: { ...dep, on_demand: true } }, 1), s);
    listener!(at({ type: "DeploymentCreated", deployment: dep }, 2), s);
    listener!(at(deleted("idle"), 3), s);
    listener!(at(deleted("room"), 4), s);
    listener!(at(deleted("room"), 5), s);
    listener!(at(deleted(), 6), s);
    const scale = { min_replicas: 1, max_replicas: 3, up_at: 4 };
    listener!(at({ type: "DeploymentCreated", deployment: { ...dep, scale } }, 7), s);
    listener!(
      at({ type: "DeploymentCreated", deployment: { ...dep, scale }, reason: "busy" }, 8),
      s,
    );
    const retire = {
      type: "DeploymentRetiring",
      deployment_id: "d",
      since: 1,
      reason: "q",
    } as const;
    listener!(at(retire, 9), s);
    listener!(at({ type: "DeploymentRecalled", deployment_id: "d", reason: "busy" }, 10), s);
    listener!(at(retire, 11), s);
    listener!(at(deleted("scale_down"), 12), s);
    const m = parsePrometheusTextFormat(await metrics.render());
    expect(valueOf(m, "ic_capacity_events_total", { action: "load" })).toBe(1);
    expect(valueOf(m, "ic_capacity_events_total", { action: "unload_idle" })).toBe(1);
    expect(valueOf(m, "ic_capacity_events_total", { action: "unload_room" })).toBe(2);
    expect(valueOf(m, "ic_capacity_events_total", { action: "scale_up" })).toBe(1);
    expect(valueOf(m, "ic_capacity_events_total", { action: "scale_retire" })).toBe(2);
    expect(valueOf(m, "ic_capacity_events_total", { action: "scale_recall" })).toBe(1);
    expect(valueOf(m, "ic_capacity_events_total", { action: "scale_down" })).toBe(1);
  });
});

describe("the observability routes", () => {
  let remoteDir: string;
  let localDir: string;
  const tail = new LogTail({ maxLines: 100 });
  const nodeLog = createLogger({ enabled: true, level: "debug", destination: devNull(), tail });

  function devNull() {
    return new Writable({ write: (_c, _e, cb) => cb() });
  }

  beforeAll(() => {
    const root = mkdtempSync(join(tmpdir(), "ic-obs-"));
    localDir = join(root, "a");
    remoteDir = join(root, "b");
    mkdirSync(localDir);
    mkdirSync(remoteDir);
    writeFileSync(join(localDir, `${INST}-rank0.log`), "main: server is listening\nslot 0: done\n");
    writeFileSync(join(remoteDir, `${INST}-rank1.log`), "rpc server listening\naccepted client\n");
  });

  async function app(opts: { busDown?: boolean } = {}) {
    const view = cluster();
    const c = await collector();
    const remote: RunnerLogSource = { peerKey: "p-b", name: "node-b", runnerLogDir: remoteDir };
    const asked: { suffix?: string }[] = [];
    const bus = {
      request: (async (name: string, msg: never, o: { suffix?: string; timeoutMs: number }) => {
        asked.push(o);
        if (opts.busDown || name !== "runnerLog" || o.suffix !== "p-b")
          throw new ServiceError("unavailable", "ic.node.runner_log.p-b: no responder");
        return readRunnerLog(remote, msg);
      }) as never,
    };
    const metrics = new NodeMetrics(sources(view, []));
    const auth = {
      tokens: [
        { name: "reader", token: TOKENS.read, scopes: ["read" as const] },
        { name: "client", token: TOKENS.inference, scopes: ["inference" as const] },
      ],
    };
    const a = createNodeApp({ auth, log: silentLogger() }, [
      {
        routes: () =>
          routesOf((h) =>
            observabilityRoutes(h, {
              name: "node-a",
              cluster: view,
              bus,
              log: silentLogger(),
              metrics,
              logTail: tail,
              runnerLogs: { peerKey: "p-a", name: "node-a", runnerLogDir: localDir },
            }),
          ),
      },
      { routes: () => telemetryRoutes(c, { node: "node-a", peer_key: "p-a" }) },
    ]);
    const get = (path: string, token = TOKENS.read, init: RequestInit = {}) =>
      a.request(path, { ...init, headers: { authorization: `Bearer ${token}` } });
    return { get, asked, c };
  }

  it("need the read scope", async () => {
    const { get } = await app();
    for (const path of [
      "/metrics",
      "/v1/diagnostics/telemetry",
      "/logs",
      `/instances/${INST}/logs`,
    ]) {
      expect((await get(path)).status, path).toBe(200);
      expect((await get(path, TOKENS.inference)).status, path).toBe(403);
      expect((await get(path, "nope")).status, path).toBe(401);
    }
  });

  it("GET /metrics answers in the Prometheus text format", async () => {
    const { get } = await app();
    const r = await get("/metrics");
    expect(r.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(parsePrometheusTextFormat(await r.text()).length).toBeGreaterThan(10);
  });

  it("GET /v1/diagnostics/telemetry shows the telemetry path's counters", async () => {
    const { get, c } = await app();
    const d0 = TelemetryDiagnosticsSchema.parse(
      await (await get("/v1/diagnostics/telemetry")).json(),
    );
    expect(d0).toMatchObject({ node: "node-a", peer_key: "p-a", heartbeat_ms: 2000 });
    expect(d0.queue.depth).toBe(2);
    const sentAt = Date.now();
    c.heartbeatPart();
    c.published(sentAt);
    await c.read();
    const d1 = TelemetryDiagnosticsSchema.parse(
      await (await get("/v1/diagnostics/telemetry")).json(),
    );
    expect(d1.admission.admitted).toBe(4);
    expect(d1.publish.published).toBe(2);
    expect(d1.publish.latency.count).toBe(2);
    expect(d1.queue.depth).toBe(2);
  });

  it("GET /instances/{id}/logs reads a local rank here and a remote rank from its node over the bus", async () => {
    const { get, asked } = await app();
    const local = (await (await get(`/instances/${INST}/logs`)).json()) as Record<string, unknown>;
    expect(local).toMatchObject({
      instance_id: INST,
      model_id: MODEL,
      rank: 0,
      node: { node_id: A, name: "node-a", peer_key: "p-a" },
      lines: ["main: server is listening", "slot 0: done"],
      truncated: false,
    });
    expect(asked).toHaveLength(0);
    const remote = (await (await get(`/instances/${INST}/logs?rank=1&tail=1`)).json()) as Record<
      string,
      unknown
    >;
    expect(remote).toMatchObject({
      rank: 1,
      node: { node_id: B, name: "node-b" },
      lines: ["accepted client"],
      truncated: true,
      file: join(remoteDir, `${INST}-rank1.log`),
    });
    expect(asked[0]?.suffix).toBe("p-b");
    const text = await get(`/instances/${INST}/logs?rank=1&format=text`);
    expect(text.headers.get("content-type")).toMatch(/^text\/plain/);
    expect(await text.text()).toBe("rpc server listening\naccepted client\n");
  });

  it("GET /instances/{id}/logs validates its parameters and names what is missing", async () => {
    const { get } = await app();
    const cases: [string, number, string][] = [
      [`/instances/${INST}/logs?rank=-1`, 400, "invalid_request"],
      [`/instances/${INST}/logs?rank=x`, 400, "invalid_request"],
      [`/instances/${INST}/logs?tail=0`, 400, "invalid_request"],
      [`/instances/${INST}/logs?tail=5001`, 400, "invalid_request"],
      [`/instances/${INST}/logs?max_bytes=999999999`, 400, "invalid_request"],
      [`/instances/${INST}/logs?other=1`, 400, "invalid_request"],
      [`/instances/..%2F..%2Fetc/logs`, 400, "invalid_request"],
      [`/instances/i.1/logs`, 400, "invalid_request"],
      [`/instances/i-404/logs`, 404, "not_found"],
      [`/instances/${INST}/logs?rank=2`, 404, "not_found"],
    ];
    for (const [path, status, code] of cases) {
      const r = await get(path);
      expect(r.status, path).toBe(status);
      expect(((await r.json()) as { error: { code: string } }).error.code, path).toBe(code);
    }
  });

  it("GET /instances/{id}/logs answers 404 for ids that are Object.prototype's keys (found by the fuzz)", async () => {
    const { get } = await app();
    for (const id of ["constructor", "toString", "hasOwnProperty", "valueOf"]) {
      const r = await get(`/instances/${id}/logs`);
      expect(r.status, id).toBe(404);
      expect(((await r.json()) as { error: { code: string } }).error.code, id).toBe("not_found");
    }
  });

  it("GET /instances/{id}/logs is 503 unavailable when the holding node does not answer", async () => {
    const { get } = await app({ busDown: true });
    const r = await get(`/instances/${INST}/logs?rank=1`);
    expect(r.status).toBe(503);
    const body = (await r.json()) as {
      error: { code: string; message: string; retryable: boolean };
    };
    expect(body.error).toMatchObject({ code: "unavailable", retryable: true });
    expect(body.error.message).toContain("node-b");
  });

  it("GET /logs returns this node's recent structured lines, filtered by level", async () => {
    const { get } = await app();
    nodeLog.debug({ component: "x" }, "a debug line");
    nodeLog.warn({ component: "x" }, "a warning");
    const all = (await (await get("/logs?tail=2")).json()) as {
      node: string;
      lines: { msg: string }[];
    };
    expect(all.node).toBe("node-a");
    expect(all.lines.map((l) => l.msg)).toEqual(["a debug line", "a warning"]);
    const warn = (await (await get("/logs?level=warn&tail=5")).json()) as {
      lines: { msg: string }[];
    };
    expect(warn.lines.map((l) => l.msg)).toContain("a warning");
    expect(warn.lines.map((l) => l.msg)).not.toContain("a debug line");
    expect((await get("/logs?tail=9999")).status).toBe(400);
    expect((await get("/logs?level=loud")).status).toBe(400);
  });

  it("GET /logs?follow=1 drops, and says so, what a follower that does not read falls behind by", async () => {
    const { get } = await app();
    const ac = new AbortController();
    const r = await get("/logs?follow=1&tail=0", TOKENS.read, { signal: ac.signal });
    const reader = r.body!.getReader();
    // Nobody reads while the node logs 1500 lines: the follower keeps at most 1000 of them.
    for (let i = 0; i < 1500; i++) nodeLog.info({ i }, "burst");
    await new Promise((res) => setTimeout(res, 20));
    let buf = "";
    let received = 0;
    let dropped = 0;
    let last = -1;
    while (last < 1499) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += new TextDecoder().decode(value);
      let i: number;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const ev = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const data = ev
          .split("\n")
          .find((l) => l.startsWith("data: "))
          ?.slice(6);
        if (!data) continue;
        if (ev.startsWith("event: dropped"))
          dropped += (JSON.parse(data) as { dropped: number }).dropped;
        else {
          received++;
          last = (JSON.parse(data) as { i: number }).i;
        }
      }
    }
    expect(last).toBe(1499);
    expect(dropped).toBeGreaterThan(0);
    expect(received).toBeLessThanOrEqual(1010);
    expect(received + dropped).toBe(1500);
    await reader.cancel();
    ac.abort();
  });

  it("GET /logs?follow=1 streams the tail, then each new line as SSE until the client leaves", async () => {
    const { get } = await app();
    nodeLog.info("before following");
    const ac = new AbortController();
    const r = await get("/logs?follow=1&tail=1", TOKENS.read, { signal: ac.signal });
    expect(r.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const reader = r.body!.getReader();
    let buf = "";
    const next = async (): Promise<{ msg: string }> => {
      for (;;) {
        const i = buf.indexOf("\n\n");
        if (i >= 0) {
          const ev = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data = ev.split("\n").find((l) => l.startsWith("data: "));
          if (data) return JSON.parse(data.slice(6)) as { msg: string };
          continue;
        }
        const { value, done } = await reader.read();
        if (done) throw new Error("stream ended");
        buf += new TextDecoder().decode(value);
      }
    };
    expect((await next()).msg).toBe("before following");
    nodeLog.info("while following");
    expect((await next()).msg).toBe("while following");
    expect(tail.stats.subscribers).toBe(1);
    await reader.cancel();
    ac.abort();
    await new Promise((res) => setTimeout(res, 50));
    expect(tail.stats.subscribers).toBe(0);
  });
});

describe("kvCacheUse", () => {
  it.each([
    [
      "idle slots hold nothing",
      [
        { id: 0, n_ctx: 512 },
        { id: 1, n_ctx: 512 },
      ],
      { tokens: 0, capacity: 1024 },
    ],
    [
      "each slot's cached sequence counts",
      [
        { id: 0, n_ctx: 512, n_prompt_tokens: 40 },
        { id: 1, n_ctx: 512, n_prompt_tokens: 600 },
      ],
      { tokens: 552, capacity: 1024 },
    ],
    ["an answer of another shape", { error: "x" }, undefined],
    ["a slot without n_ctx", [{ id: 0 }], undefined],
  ])("%s", (_what, slots, want) => {
    expect(kvCacheUse(slots)).toEqual(want);
  });
});
