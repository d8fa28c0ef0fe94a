// Tracing on a real 2-host cluster (network namespaces, bearer tokens, the engine on the other host):
// the switch over HTTP, Chrome trace files with the named spans, stats equal to llama-server's own
// timings (streaming and not), the cluster view deduplicated across nodes, and a killed peer listed
// as unreachable instead of failing the view.
import { copyFileSync, mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  placeAndWait,
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";
import { SPAN } from "./trace.ts";
import type { ChromeTrace, TraceStats } from "./trace.ts";

interface Timings {
  prompt_n: number;
  prompt_ms: number;
  predicted_n: number;
  predicted_ms: number;
  cache_n?: number;
}

const setTracing = (n: NodeProcess, enabled: boolean) =>
  fetch(`${n.apiUrl}/v1/tracing`, {
    method: "PUT",
    headers: { "content-type": "application/json", ...n.authHeaders },
    body: JSON.stringify({ enabled }),
  });

async function chat(
  n: NodeProcess,
  model: string,
  stream: boolean,
): Promise<{ taskId: string; id: string; timings: Timings }> {
  const res = await n.post("/v1/chat/completions", {
    model,
    messages: [{ role: "user", content: "Tell me about clusters" }],
    max_tokens: 8,
    stream,
  });
  expect(res.status).toBe(200);
  const taskId = res.headers.get("x-task-id")!;
  expect(taskId).toMatch(/^t-/);
  const text = await res.text();
  if (!stream) {
    const body = JSON.parse(text) as { id: string; timings: Timings };
    return { taskId, id: body.id, timings: body.timings };
  }
  // The final SSE chunk carries llama-server's timings.
  // Each event starts with its engine offset (`id: N`, resumable streams).
  const events = text
    .split("\n\n")
    .map((e) => e.replace(/^id: \d+\n/, ""))
    .filter((e) => e.startsWith("data: ") && e !== "data: [DONE]")
    .map((e) => JSON.parse(e.slice(6)) as { id: string; timings?: Timings });
  const last = events.findLast((e) => e.timings)!;
  expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
  return { taskId, id: last.id, timings: last.timings! };
}

const traceDir = (n: NodeProcess) => join(n.dataDir, "traces");

describe("tracing across hosts", () => {
  it("saves Chrome traces with the engine's timings, merges the cluster view and names a dead peer", async () => {
    const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-store-")));
    await using cluster = await startHostCluster(2, {
      config: (i) => ({
        ...(i === 0 ? { store_path: store } : {}),
        // A dead member stays in the live view long enough to be asked (and found unreachable).
        cluster: { liveness_timeout_ms: 5000 },
      }),
    });
    const [n1, n2] = cluster.nodes as [NodeProcess, NodeProcess];
    const docs = await waitForConvergence(cluster.nodes, 2);
    const node1Id = docs[0]!.node_identities.find((x) => x.name === "node-1")!.node_id;
    // The engine runs on node-2's host; requests through node-1 cross hosts to reach it.
    await placeAndWait(n1, { model_id: modelId, min_nodes: 1, excluded_nodes: [node1Id] });
    for (const n of cluster.nodes)
      await waitFor(
        async () =>
          (await n.get<{ data: { id: string }[] }>("/v1/models")).data.length > 0
            ? true
            : undefined,
        { timeoutMs: 15_000, what: `model ready on ${n.spec.name}` },
      );

    // Off (the config's default): a request leaves no trace.
    expect(await n1.get("/v1/tracing")).toMatchObject({ enabled: false });
    const untraced = await chat(n1, modelId, false);
    const absent = await fetch(`${n1.apiUrl}/v1/traces/${untraced.taskId}/stats`, {
      headers: n1.authHeaders,
    });
    expect(absent.status).toBe(404);

    // On, through the API (admin scope), on both nodes.
    for (const n of cluster.nodes) {
      const r = await setTracing(n, true);
      expect(r.status).toBe(200);
      expect(await r.json()).toMatchObject({ enabled: true });
    }
    const plain = await chat(n1, modelId, false);
    const streamed = await chat(n1, modelId, true);
    const viaNode2 = await chat(n2, modelId, true);
    // The trace key is the master's task id, never the completion id.
    expect(plain.taskId).not.toBe(plain.id);

    // Written off the request path: they appear shortly after the responses.
    const list = await waitFor(
      async () => {
        const l = await n1.get<{
          traces: { taskId: string; modelId: string; createdAt: string }[];
        }>("/v1/traces");
        return l.traces.length >= 2 ? l : undefined;
      },
      { timeoutMs: 5000, what: "node-1's traces" },
    );
    expect(list.traces.map((t) => t.taskId)).toEqual([streamed.taskId, plain.taskId]);
    expect(list.traces[0]).toMatchObject({ modelId });
    expect(Date.parse(list.traces[0]!.createdAt)).toBeGreaterThan(Date.now() - 60_000);

    // One Chrome trace event file per trace, with the named spans.
    for (const r of [plain, streamed]) {
      const files = readdirSync(traceDir(n1)).filter((f) => f.endsWith(`_${r.taskId}.json`));
      expect(files).toHaveLength(1);
      const trace = JSON.parse(readFileSync(join(traceDir(n1), files[0]!), "utf8")) as ChromeTrace;
      const complete = trace.traceEvents.filter((e) => e.ph === "X");
      for (const e of complete) {
        expect(typeof e.ts).toBe("number");
        expect(e.dur).toBeGreaterThanOrEqual(0);
        expect(Number.isInteger(e.pid) && Number.isInteger(e.tid)).toBe(true);
      }
      expect(complete.map((e) => e.name).sort()).toEqual(
        [
          SPAN.root,
          SPAN.validate,
          SPAN.route,
          SPAN.connect,
          SPAN.task,
          SPAN.queue,
          SPAN.prefill,
          SPAN.decode,
          SPAN.stream,
        ].sort(),
      );
      const root = complete.find((e) => e.name === SPAN.root)!;
      expect(root.args).toMatchObject({ taskId: r.taskId, modelId, commandId: r.id });
      expect(root.args?.instanceId).toMatch(/^i-/);
      // The same file over HTTP.
      expect(await n1.get(`/v1/traces/${r.taskId}`)).toEqual(trace);

      // Stats: the engine's figures unchanged.
      const s = await n1.get<TraceStats>(`/v1/traces/${r.taskId}/stats`);
      expect(s.prefillMs).toBe(r.timings.prompt_ms);
      expect(s.decodeMs).toBe(r.timings.predicted_ms);
      expect(s.promptTokens).toBe(r.timings.prompt_n);
      expect(s.completionTokens).toBe(r.timings.predicted_n);
      expect(s.totalMs).toBeGreaterThanOrEqual(s.prefillMs! + s.decodeMs!);
      expect(s.queueMs).toBeGreaterThanOrEqual(0);
      expect(s.ttftMs).toBeGreaterThan(0);
      expect(s.ttftMs).toBeLessThanOrEqual(s.totalMs);
      expect(s.tokensPerSecond).toBeGreaterThan(0);
    }

    // Cluster view: node-2's trace joins; a trace both nodes hold (copied there) appears once.
    await waitFor(
      async () =>
        readdirSync(traceDir(n2)).some((f) => f.endsWith(`_${viaNode2.taskId}.json`))
          ? true
          : undefined,
      { timeoutMs: 5000, what: "node-2's trace" },
    );
    const shared = readdirSync(traceDir(n1)).find((f) => f.endsWith(`_${plain.taskId}.json`))!;
    copyFileSync(join(traceDir(n1), shared), join(traceDir(n2), shared));
    expect(
      (await n2.get<{ traces: { taskId: string }[] }>("/v1/traces")).traces.map((t) => t.taskId),
    ).toEqual([viaNode2.taskId, plain.taskId]);
    const view = await n1.get<{
      traces: { taskId: string; node: string }[];
      nodes: string[];
      unreachable: unknown[];
    }>("/v1/traces/cluster");
    expect(view.unreachable).toEqual([]);
    expect(view.nodes).toEqual(["node-1", "node-2"]);
    expect(view.traces.map((t) => [t.taskId, t.node])).toEqual([
      [viaNode2.taskId, "node-2"],
      [streamed.taskId, "node-1"],
      [plain.taskId, "node-1"],
    ]);
    const remote = await n1.get<TraceStats & { foundOn: string }>(
      `/v1/traces/cluster/${viaNode2.taskId}/stats`,
    );
    expect(remote).toMatchObject({
      taskId: viaNode2.taskId,
      foundOn: "node-2",
      node: "node-2",
      prefillMs: viaNode2.timings.prompt_ms,
      decodeMs: viaNode2.timings.predicted_ms,
    });

    // Off again: new requests are not traced.
    expect((await setTracing(n1, false)).status).toBe(200);
    const after = await chat(n1, modelId, false);
    await new Promise((r) => setTimeout(r, 300));
    expect(readdirSync(traceDir(n1)).some((f) => f.includes(after.taskId))).toBe(false);

    // A killed peer: the view still answers, naming it.
    n2.kill("SIGKILL");
    const t0 = Date.now();
    const degraded = await n1.get<{
      traces: { taskId: string }[];
      nodes: string[];
      unreachable: { node: string; error: string }[];
    }>("/v1/traces/cluster");
    expect(Date.now() - t0).toBeLessThan(3000);
    expect(degraded.unreachable).toEqual([{ node: "node-2", error: expect.any(String) }]);
    expect(degraded.nodes).toEqual(["node-1"]);
    expect(degraded.traces.map((t) => t.taskId)).toEqual([streamed.taskId, plain.taskId]);
  });
});
