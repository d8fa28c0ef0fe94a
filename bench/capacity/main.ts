// Capacity that follows demand (issue 49; docs/capacity.md), on 3 lab hosts with real engines:
// 1. The time from a model's first request to its first token: cold from the store (the node copies
//    it, then the engine loads), cold but staged (unloaded by keep_alive 0, its copy kept on disk),
//    and warm (loaded), the baseline of the same run. Each RUNS times, a stream through another node.
// 2. A burst (BURST requests kept in flight, streaming, through the three gateways, for BURST_S
//    seconds) on a placement of one fixed replica against one that follows load (1 to 3 replicas,
//    windows 1 s up and 5 s down), each on a fresh cluster: goodput (requests per second whose TTFT
//    met the SLO), TTFT p50/p99 and the replicas reached. Twice: with the stand-in engine given 4
//    slots at 100 tokens/s per stream (an engine-bound server on hardware of its own: a replica adds
//    slots, not load on the others), and with real llama-server, whose replicas here share this
//    machine's cores (more replicas add no compute; they compete for it).
// Reports only; writes its section of docs/benchmarks.md. BENCH_RUNS, BENCH_BURST, BENCH_BURST_S and
// BENCH_SLO_MS change the workload.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { seedStore, startHostCluster, waitFor, waitForConvergence } from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";
import { machineLine, quantile, writeSection } from "../lib/report.ts";
import { STAND_IN } from "../lib/stand-in.ts";

const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const BURST = Number(process.env.BENCH_BURST ?? 16);
const BURST_S = Number(process.env.BENCH_BURST_S ?? 30);
const SLO_MS = Number(process.env.BENCH_SLO_MS ?? 500);
/** The stand-in engine's slots and rate (tokens per second per stream). */
const STAND_IN_ARGS = ["--stand-in-slots", "4", "--stand-in-tps", "100"];
const MAX_TOKENS = 32;

interface StateDoc {
  models: { model_id: string }[];
  instances: { instance_id: string; runners: { state: string }[] }[];
  deployments: unknown[];
}

/** One streaming request: ms to the first content chunk, or the failure. */
async function ttft(node: NodeProcess, model: string, n: number): Promise<number> {
  const start = performance.now();
  const r = await fetch(`${node.apiUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { ...node.authHeaders, "content-type": "application/json" },
    body: JSON.stringify({
      model,
      messages: [{ role: "user", content: `Tell me about river ${n}.` }],
      max_tokens: MAX_TOKENS,
      stream: true,
    }),
  });
  if (r.status !== 200 || !r.body) throw new Error(`chat ${r.status}: ${await r.text()}`);
  let first = NaN;
  let buf = "";
  const decoder = new TextDecoder();
  for await (const chunk of r.body) {
    buf += decoder.decode(chunk as Uint8Array, { stream: true });
    if (Number.isNaN(first) && /"content":"[^"]/.test(buf)) first = performance.now() - start;
    if (buf.includes("data: [DONE]")) break;
    if (buf.includes('data: {"error"')) throw new Error(`stream failed: ${buf.slice(-400)}`);
  }
  if (Number.isNaN(first)) throw new Error(`no content in ${buf.slice(0, 400)}`);
  return first;
}

const loaded = async (n: NodeProcess) =>
  (await n.get<StateDoc>("/state")).instances.filter(
    (i) => i.runners.length > 0 && i.runners.every((r) => r.state === "RunnerReady"),
  ).length;

async function registered(nodes: readonly NodeProcess[], count: number): Promise<void> {
  for (const n of nodes)
    await waitFor(
      async () => ((await n.get<StateDoc>("/state")).models.length >= count ? true : undefined),
      { timeoutMs: 30_000, what: "the models registered" },
    );
}

/** Part 1: first request to first token, cold (from the store, staged) and warm. */
async function firstToken(): Promise<{ cold: number[]; staged: number[]; warm: number[] }> {
  const store = mkdtempSync(join(tmpdir(), "ic-bench-capacity-"));
  const ids = Array.from({ length: RUNS }, (_, i) => `bench/cap-${i}`);
  for (const id of ids) {
    await seedStore(store, { modelId: id });
    writeFileSync(
      join(store, id.replace("/", "--"), "model.json"),
      JSON.stringify({ keep_alive: 0 }),
    );
  }
  await using cluster = await startHostCluster(3, {
    config: (i) => ({ ...(i === 0 ? { store_path: store } : {}), chat: { on_demand: true } }),
  });
  const [n1, n2, n3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
  await waitForConvergence(cluster.nodes, 3);
  await registered(cluster.nodes, RUNS);
  const out = { cold: [] as number[], staged: [] as number[], warm: [] as number[] };
  for (const [k, id] of ids.entries()) {
    // Never placed, never staged anywhere: the node copies it from the store host first.
    out.cold.push(await ttft(n2, id, k));
    // Loaded: the baseline (keep_alive 0 unloads it after each answer, so it is asked again at once
    // from a second client while the first still streams).
    out.warm.push(
      await Promise.all([ttft(n3, id, k + 100), ttft(n1, id, k + 200)]).then((t) => Math.min(...t)),
    );
    await waitFor(async () => ((await loaded(n1)) === 0 ? true : undefined), {
      timeoutMs: 15_000,
      what: "the model unloaded (keep_alive 0)",
    });
    // Unloaded, its copy still staged on the node that held it.
    out.staged.push(await ttft(n3, id, k + 300));
    await waitFor(async () => ((await loaded(n1)) === 0 ? true : undefined), {
      timeoutMs: 15_000,
      what: "the model unloaded again",
    });
  }
  return out;
}

interface BurstResult {
  readonly ttfts: number[];
  readonly failed: number;
  readonly seconds: number;
  readonly replicas: number;
}

/** Part 2: the burst on a fixed replica or on one that follows load. */
async function burst(follow: boolean, standIn: boolean, fixedReplicas = 1): Promise<BurstResult> {
  const store = mkdtempSync(join(tmpdir(), "ic-bench-capacity-"));
  const { modelId } = await seedStore(store);
  await using cluster = await startHostCluster(3, {
    ...(standIn ? { env: { SERVICE_ENGINE_SERVER_BIN: STAND_IN } } : {}),
    config: (i) => ({
      ...(i === 0 ? { store_path: store } : {}),
      cluster: { scale_up_window_ms: 1000, scale_down_window_ms: 5000 },
      ...(standIn ? { engine: { extra_args: STAND_IN_ARGS } } : {}),
    }),
  });
  const nodes = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
  await waitForConvergence(nodes, 3);
  await registered(nodes, 1);
  const body = follow
    ? { model_id: modelId, min_replicas: 1, max_replicas: 3, scale_up_at: 4 }
    : { model_id: modelId, replicas: fixedReplicas };
  const placed = await nodes[0].post("/place_instance", body);
  if (placed.status !== 200) throw new Error(`place: ${await placed.text()}`);
  const start0 = follow ? 1 : fixedReplicas;
  await waitFor(async () => ((await loaded(nodes[0])) === start0 ? true : undefined), {
    timeoutMs: 30_000,
    what: "the replicas it starts with",
  });
  const ttfts: number[] = [];
  let failed = 0;
  let replicas = start0;
  let k = 0;
  const start = performance.now();
  const until = start + BURST_S * 1000;
  const watch = setInterval(() => {
    void loaded(nodes[0]).then((n) => (replicas = Math.max(replicas, n)));
  }, 500);
  const worker = async () => {
    while (performance.now() < until) {
      const n = k++;
      try {
        ttfts.push(await ttft(nodes[n % 3]!, modelId, n));
      } catch {
        failed++;
      }
    }
  };
  await Promise.all(Array.from({ length: BURST }, worker));
  clearInterval(watch);
  return { ttfts, failed, seconds: (performance.now() - start) / 1000, replicas };
}

const ms = (v: number) => `${Math.round(v)} ms`;
const p = (xs: readonly number[], q: number) =>
  quantile(
    [...xs].sort((a, b) => a - b),
    q,
  );

async function main(): Promise<void> {
  const first = await firstToken();
  const runs = {
    standIn: { fixed: await burst(false, true), follow: await burst(true, true) },
    real: {
      fixed: await burst(false, false),
      three: await burst(false, false, 3),
      follow: await burst(true, false),
    },
  };
  const warm = p(first.warm, 0.5);
  const row = (what: string, xs: number[]) =>
    `| ${what} | ${ms(p(xs, 0.5))} | ${ms(Math.min(...xs))}–${ms(Math.max(...xs))} | ${(p(xs, 0.5) / warm).toFixed(1)}× |`;
  const goodput = (r: BurstResult) => r.ttfts.filter((t) => t <= SLO_MS).length / r.seconds;
  const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}×`;
  const burstRow = (engine: string, what: string, r: BurstResult) =>
    `| ${engine} | ${what} | ${r.replicas} | ${(r.ttfts.length / r.seconds).toFixed(1)} | ${goodput(r).toFixed(1)} | ${ms(p(r.ttfts, 0.5))} | ${ms(p(r.ttfts, 0.99))} | ${r.failed} |`;
  const body = [
    `${machineLine()}. 3 lab hosts on this machine's ${(await import("node:os")).availableParallelism()} cores, real llama-server, the tiny model (about 0.8 MB). \`npm run bench capacity\`.`,
    "",
    `### First request to first token (${RUNS} runs, a stream through another node than the one that loads it)`,
    "",
    "| the model was | median | range | vs warm (same run) |",
    "| --- | --- | --- | --- |",
    row("never loaded (copied from the store host, then loaded)", first.cold),
    row("unloaded by keep_alive 0, its copy staged", first.staged),
    row("loaded (the baseline)", first.warm),
    "",
    `### A burst: ${BURST} streams in flight for ${BURST_S} s through the three gateways (SLO: TTFT ≤ ${SLO_MS} ms)`,
    "",
    "| engine | placement | replicas reached | requests/s | goodput (req/s within SLO) | TTFT p50 | TTFT p99 | failed |",
    "| --- | --- | --- | --- | --- | --- | --- | --- |",
    burstRow(
      "stand-in, 4 slots at 100 tok/s",
      "one fixed replica (the baseline)",
      runs.standIn.fixed,
    ),
    burstRow(
      "stand-in, 4 slots at 100 tok/s",
      "follows load: 1–3, above 4 per replica for 1 s",
      runs.standIn.follow,
    ),
    burstRow("llama-server (shared cores)", "one fixed replica (the baseline)", runs.real.fixed),
    burstRow("llama-server (shared cores)", "three fixed replicas", runs.real.three),
    burstRow(
      "llama-server (shared cores)",
      "follows load: 1–3, above 4 per replica for 1 s",
      runs.real.follow,
    ),
    "",
    `Load-driven vs fixed, stand-in: goodput ${ratio(goodput(runs.standIn.follow), goodput(runs.standIn.fixed))}, TTFT p99 ${ratio(p(runs.standIn.follow.ttfts, 0.99), p(runs.standIn.fixed.ttfts, 0.99))}; llama-server on shared cores: goodput ${ratio(goodput(runs.real.follow), goodput(runs.real.fixed))}, TTFT p99 ${ratio(p(runs.real.follow.ttfts, 0.99), p(runs.real.fixed.ttfts, 0.99))}.`,
  ].join("\n");
  console.log(body);
  await writeSection("Capacity that follows demand", body);
}

await main();
