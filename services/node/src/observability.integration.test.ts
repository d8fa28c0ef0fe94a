// Observability as deployed: two nodes on their own hosts (network namespaces). /metrics parses as
// Prometheus text and its request counters move with chat requests (and the engine's own metrics come
// with model, instance and rank labels); the runner log of an instance on node-2 reads over HTTP from
// node-1; /v1/diagnostics/telemetry counters move with heartbeats; LOG_LEVEL=debug reaches the node's
// lines. On loopback (a single-process concern): a dead log sink never stalls requests.
import { mkdtempSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import type { AddressInfo, Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import type { ParsedFamily } from "parse-prometheus-text-format";
import { describe, expect, it } from "vitest";
import { TelemetryDiagnosticsSchema } from "@ic/protocol";
import type { TelemetryDiagnostics } from "@ic/protocol";
import {
  placeAndWait,
  seedStore,
  startCluster,
  startHostCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";
import { parseExposition } from "./observability/prom-text.ts";
import { REPO_ROOT } from "@ic/testkit";

async function scrape(node: NodeProcess): Promise<{ text: string; fams: ParsedFamily[] }> {
  const r = await fetch(`${node.apiUrl}/metrics`, { headers: node.authHeaders });
  expect(r.status).toBe(200);
  expect(r.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
  const text = await r.text();
  // The parser throws on any line that is not valid text format.
  const fams = parsePrometheusTextFormat(text);
  expect(new Set(fams.map((f) => f.name)).size).toBe(fams.length);
  return { text, fams };
}

const sample = (fams: ParsedFamily[], name: string, labels: Record<string, string>) =>
  fams
    .find((f) => f.name === name)
    ?.metrics.find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v));

const counter = (fams: ParsedFamily[], name: string, labels: Record<string, string>) =>
  Number(sample(fams, name, labels)?.value ?? 0);

/** A labelled histogram's sample count (the text parser keeps only unlabelled histograms whole). */
function histogramCount(text: string, name: string, labels: Record<string, string>): number {
  const s = parseExposition(text)
    .find((f) => f.name === name)
    ?.samples.find(
      (x) =>
        x.name === `${name}_count` &&
        Object.entries(labels).every(([k, v]) => x.labels.some((l) => l[0] === k && l[1] === v)),
    );
  return Number(s?.value ?? 0);
}

async function chat(node: NodeProcess, model: string, stream: boolean): Promise<void> {
  const r = await node.post("/v1/chat/completions", {
    model,
    messages: [{ role: "user", content: "Hello" }],
    max_tokens: 4,
    stream,
  });
  const body = await r.text();
  expect(r.status, body).toBe(200);
  if (stream) expect(body).toContain("data: [DONE]");
}

/** Every metric family the shipped Grafana dashboard's queries name (histogram series folded). */
function dashboardMetrics(): Set<string> {
  const dash = JSON.parse(
    readFileSync(join(REPO_ROOT, "deploy", "grafana", "inference-cluster.json"), "utf8"),
  ) as { panels: { targets: { expr: string }[] }[] };
  const names = new Set<string>();
  for (const p of dash.panels)
    for (const t of p.targets)
      // Label names (in `by (…)` and `{…}`) are not metrics.
      for (const m of t.expr
        .replace(/\b(by|without) \([^)]*\)|\{[^}]*\}/g, "")
        .matchAll(/\b(ic_[a-z0-9_]+|llamacpp:[a-z0-9_]+)/g))
        names.add(m[1]!.replace(/_(bucket|sum|count)$/, ""));
  expect(names.size).toBeGreaterThan(15);
  return names;
}

async function diagnostics(node: NodeProcess): Promise<TelemetryDiagnostics> {
  return TelemetryDiagnosticsSchema.parse(await node.get("/v1/diagnostics/telemetry"));
}

describe("observability across hosts", () => {
  it("metrics, runner logs across nodes, telemetry diagnostics and LOG_LEVEL", async () => {
    const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-store-")));
    await using cluster = await startHostCluster(2, {
      config: (i) => ({ ...(i === 0 ? { store_path: store } : {}) }),
      // node-2 logs at debug through the environment; node-1 stays at the config's info.
      env: (i): Record<string, string> => (i === 1 ? { LOG_LEVEL: "debug" } : {}),
    });
    const [n1, n2] = cluster.nodes as [NodeProcess, NodeProcess];
    const docs = await waitForConvergence(cluster.nodes, 2);
    const idOf = (name: string) => docs[0]!.node_identities.find((n) => n.name === name)!.node_id;
    // The instance lives on node-2 only.
    const inst = await placeAndWait(n1, {
      model_id: modelId,
      min_nodes: 1,
      excluded_nodes: [idOf("node-1")],
    });
    expect(inst.assignments.map((a) => a.node_id)).toEqual([idOf("node-2")]);

    // --- /metrics: request counters and histograms move with chat requests through node-1.
    const ok = { model: modelId, status: "200", code: "ok" };
    const before = await scrape(n1);
    const count0 = counter(before.fams, "ic_chat_requests_total", ok);
    await chat(n1, modelId, false);
    await chat(n1, modelId, true);
    const missing = await n1.post("/v1/chat/completions", {
      model: "nobody/nothing",
      messages: [{ role: "user", content: "x" }],
      max_tokens: 2,
    });
    expect(missing.status).toBe(404);
    const after = await scrape(n1);
    expect(counter(after.fams, "ic_chat_requests_total", ok)).toBe(count0 + 2);
    expect(
      counter(after.fams, "ic_chat_requests_total", {
        model: "unknown",
        status: "404",
        code: "model_not_found",
      }),
    ).toBe(1);
    expect(
      histogramCount(after.text, "ic_chat_time_to_first_token_seconds", { model: modelId }) -
        histogramCount(before.text, "ic_chat_time_to_first_token_seconds", { model: modelId }),
    ).toBe(2);
    expect(counter(after.fams, "ic_chat_completion_tokens_total", { model: modelId })).toBe(
      counter(before.fams, "ic_chat_completion_tokens_total", { model: modelId }) + 8,
    );
    // The gateway's prompt-cache map checked both answers against the engine's own counts.
    const byInstance = { ic_instance: inst.instance_id };
    expect(counter(after.fams, "ic_prompt_cache_requests_total", byInstance)).toBe(
      counter(before.fams, "ic_prompt_cache_requests_total", byInstance) + 2,
    );
    expect(counter(after.fams, "ic_prompt_cache_prompt_tokens_total", byInstance)).toBeGreaterThan(
      counter(before.fams, "ic_prompt_cache_prompt_tokens_total", byInstance),
    );
    // Bus traffic since the connection opened (heartbeats both ways at least); bytes exceed messages.
    for (const direction of ["in", "out"]) {
      const msgs = counter(after.fams, "ic_bus_messages_total", { direction });
      expect(msgs).toBeGreaterThan(0);
      expect(counter(after.fams, "ic_bus_bytes_total", { direction })).toBeGreaterThan(msgs);
    }
    // node-1 is the master: cluster gauges; its own node gauges.
    expect(counter(after.fams, "ic_cluster_members", {})).toBe(2);
    expect(counter(after.fams, "ic_cluster_instances", { ready: "true" })).toBe(1);
    expect(counter(after.fams, "ic_node_memory_total_bytes", { node: "node-1" })).toBeGreaterThan(
      0,
    );
    expect(counter(after.fams, "ic_node_runners", { state: "RunnerReady" })).toBe(0);
    // node-2 runs the engine: its llama-server's own metrics, labelled; no cluster gauges there.
    const m2 = await scrape(n2);
    const labels = { model: modelId, ic_instance: inst.instance_id, rank: "0", node: "node-2" };
    expect(counter(m2.fams, "ic_runner_scrape_up", labels)).toBe(1);
    expect(counter(m2.fams, "ic_node_runners", { state: "RunnerReady" })).toBe(1);
    const engineFams = m2.fams.filter((f) => f.name.startsWith("llamacpp:"));
    expect(engineFams.length).toBeGreaterThan(3);
    expect(counter(m2.fams, "llamacpp:prompt_tokens_total", labels)).toBeGreaterThan(0);
    // KV-cache use from the engine's /slots: the two chats left their tokens in the cache.
    const held = counter(m2.fams, "ic_engine_kv_cache_tokens", labels);
    const capacity = counter(m2.fams, "ic_engine_kv_cache_capacity_tokens", labels);
    expect(held).toBeGreaterThan(0);
    expect(capacity).toBeGreaterThanOrEqual(held);
    expect(counter(m2.fams, "ic_engine_kv_cache_usage_ratio", labels)).toBeCloseTo(
      held / capacity,
      6,
    );
    expect(counter(m2.fams, "llamacpp:requests_deferred", labels)).toBe(0);
    expect(m2.fams.some((f) => f.name.startsWith("ic_cluster_"))).toBe(false);

    // The shipped Grafana dashboard asks only for metrics the nodes serve (master's and engine node's).
    const served = new Set([...after.fams, ...m2.fams].map((f) => f.name));
    for (const name of dashboardMetrics())
      expect(served.has(name), `deploy/grafana: ${name} is not served by /metrics`).toBe(true);

    // --- runner logs of the instance on node-2, read over HTTP from node-1.
    const logs = await n1.get<{
      node: { name: string };
      file: string;
      lines: string[];
      size_bytes: number;
    }>(`/instances/${inst.instance_id}/logs?rank=0&tail=40`);
    expect(logs.node.name).toBe("node-2");
    expect(logs.file).toBe(join(n2.dataDir, "runners", `${inst.instance_id}-rank0.log`));
    expect(logs.lines.length).toBeGreaterThan(0);
    expect(logs.lines.length).toBeLessThanOrEqual(40);
    expect(logs.size_bytes).toBeGreaterThan(0);
    const text = await fetch(
      `${n1.apiUrl}/instances/${inst.instance_id}/logs?rank=0&tail=400&format=text`,
      { headers: n1.authHeaders },
    );
    expect(text.status).toBe(200);
    expect(await text.text()).toMatch(/server|listening|model/i);
    const noRank = await fetch(`${n1.apiUrl}/instances/${inst.instance_id}/logs?rank=1`, {
      headers: n1.authHeaders,
    });
    expect(noRank.status).toBe(404);
    const escape = await fetch(`${n1.apiUrl}/instances/..%2F..%2Fetc%2Fpasswd/logs`, {
      headers: n1.authHeaders,
    });
    expect(escape.status).toBe(400);

    // --- telemetry diagnostics: counters move with heartbeats (500 ms in tests).
    const d0 = await diagnostics(n1);
    const d1 = await waitFor(
      async () => {
        const d = await diagnostics(n1);
        return d.publish.confirmed_heartbeats >= d0.publish.confirmed_heartbeats + 3
          ? d
          : undefined;
      },
      { timeoutMs: 10_000, what: "three more heartbeats confirmed" },
    );
    expect(d1.admission.admitted).toBeGreaterThan(d0.admission.admitted);
    expect(d1.publish.published).toBeGreaterThan(d0.publish.published);
    expect(d1.publish.heartbeats).toBeGreaterThan(d0.publish.heartbeats);
    expect(d1.publish.latency.count).toBeGreaterThan(0);
    expect(d1.publish.latency.p99_ms).toBeLessThan(2000);
    expect(d1.kinds.readings!.published).toBeGreaterThan(0);
    expect(d1.kinds.links!.published).toBeGreaterThan(0);
    expect(d1.drops.total).toBe(0);
    expect(d1.queue.depth).toBeLessThanOrEqual(d1.queue.capacity);
    expect(d1.readings.completed).toBeGreaterThan(d0.readings.completed);

    // --- LOG_LEVEL=debug: node-2's debug lines are written (stdout and /logs); node-1's are not.
    const level = (l: string) => {
      try {
        return (JSON.parse(l) as { level?: number }).level;
      } catch {
        return undefined;
      }
    };
    expect(n2.logLines.some((l) => level(l) === 20)).toBe(true);
    expect(n1.logLines.some((l) => level(l) === 20)).toBe(false);
    const own = await n2.get<{ node: string; lines: { level: number; msg: string }[] }>(
      "/logs?tail=500",
    );
    expect(own.node).toBe("node-2");
    expect(own.lines.some((l) => l.level === 20 && l.msg === "telemetry reading")).toBe(true);
    const warnOnly = await n2.get<{ lines: { level: number }[] }>("/logs?tail=500&level=warn");
    expect(warnOnly.lines.every((l) => l.level >= 40)).toBe(true);
  });
});

describe("a dead log sink", () => {
  it("never stalls requests: a logging.ingest_url that accepts and never answers", async () => {
    // The sink accepts connections and never answers (a hung collector).
    const sockets = new Set<Socket>();
    let connections = 0;
    const sink = createServer((s) => {
      connections++;
      sockets.add(s);
      s.on("error", () => {});
    });
    await new Promise<void>((r) => sink.listen(0, "127.0.0.1", r));
    const port = (sink.address() as AddressInfo).port;
    try {
      const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-store-")));
      await using cluster = await startCluster(1, {
        config: () => ({
          store_path: store,
          logging: { level: "debug", ingest_url: `http://127.0.0.1:${port}/ingest` },
        }),
      });
      const node = cluster.nodes[0]!;
      await waitForConvergence(cluster.nodes, 1);
      await placeAndWait(node, { model_id: modelId, min_nodes: 1 });
      const times: number[] = [];
      for (let i = 0; i < 20; i++) {
        const started = performance.now();
        await chat(node, modelId, i % 2 === 0);
        times.push(performance.now() - started);
      }
      // The node tried the sink; requests never waited on it (an idle tiny model answers in ms).
      expect(connections).toBeGreaterThan(0);
      expect(Math.max(...times)).toBeLessThan(3000);
      const d = await diagnostics(node);
      expect(d.publish.published).toBeGreaterThan(0);
      const logs = await node.get<{ lines: unknown[] }>("/logs?tail=10");
      expect(logs.lines.length).toBe(10);
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((r) => sink.close(r));
    }
  });
});
