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
// 3. The shrink after the stand-in's burst: SHRINK_C streams kept in flight until the set is back to
//    one replica. Each step retires a replica (no new requests) and removes it once its requests have
//    ended: the requests that failed, TTFT before, during and after the shrink, how long each replica
//    drained, and the requests that began on a retiring replica after its gateways had the event.
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

/** The streams kept in flight while the set shrinks (below half of 4 per replica for one fewer). */
const SHRINK_C = 2;

/** One streaming request: ms to the first content chunk, or the failure. */
async function ttft(node: NodeProcess, model: string, n: number): Promise<number> {
  return (await stream(node, model, n)).ms;
}

/** One streaming request: ms to the first content chunk and the instance that served it. */
async function stream(
  node: NodeProcess,
  model: string,
  n: number,
): Promise<{ ms: number; instance: string }> {
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
  const instance = r.headers.get("x-instance-id") ?? "";
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
  return { ms: first, instance };
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
  /** After the burst of a set that follows load, with the stand-in: the shrink back to one. */
  readonly shrink?: ShrinkResult;
}

interface ShrinkSample {
  /** When it was sent (ms, epoch). */
  readonly at: number;
  readonly ms?: number;
  readonly instance?: string;
  readonly failed?: string;
}

interface ShrinkResult {
  readonly samples: readonly ShrinkSample[];
  /** Each replica removed: when it began to retire and when it was deleted (ms, epoch). */
  readonly steps: readonly { instance: string; retiredAt: number; deletedAt: number }[];
  /** The set was back to one replica (false: not within SHRINK_LIMIT_MS). */
  readonly done: boolean;
}

const SHRINK_LIMIT_MS = 60_000;

interface EventsDoc {
  records: {
    at: number;
    type: string;
    event: {
      deployment_id?: string;
      cause?: string;
      deployment?: { deployment_id: string; instance_id: string };
    };
  }[];
}

/** Part 3: SHRINK_C streams in flight until the set is back to one replica, then 5 s more. */
async function shrink(nodes: readonly NodeProcess[], model: string): Promise<ShrinkResult> {
  const samples: ShrinkSample[] = [];
  let stop = false;
  let k = 10_000;
  const worker = async () => {
    while (!stop) {
      const n = k++;
      const at = Date.now();
      try {
        samples.push({ at, ...(await stream(nodes[n % 3]!, model, n)) });
      } catch (e) {
        samples.push({ at, failed: (e as Error).message.slice(0, 200) });
      }
    }
  };
  const workers = Array.from({ length: SHRINK_C }, worker);
  const deployments = async () => (await nodes[0]!.get<StateDoc>("/state")).deployments.length;
  const done = await waitFor(async () => ((await deployments()) === 1 ? true : undefined), {
    timeoutMs: SHRINK_LIMIT_MS,
    intervalMs: 250,
    what: "the set back to one replica",
  }).then(
    () => true,
    () => false,
  );
  await new Promise((r) => setTimeout(r, 5000));
  stop = true;
  await Promise.all(workers);
  const read = async (type: string) =>
    (await nodes[0]!.get<EventsDoc>(`/events?type=${type}&limit=5000`)).records;
  const instanceOf = new Map(
    (await read("DeploymentCreated")).flatMap((r) =>
      r.event.deployment
        ? [[r.event.deployment.deployment_id, r.event.deployment.instance_id]]
        : [],
    ),
  );
  const deleted = (await read("DeploymentDeleted")).filter((r) => r.event.cause === "scale_down");
  const steps = (await read("DeploymentRetiring")).flatMap((r) => {
    const gone = deleted.find((d) => d.event.deployment_id === r.event.deployment_id);
    const instance = instanceOf.get(r.event.deployment_id ?? "");
    return gone && instance ? [{ instance, retiredAt: r.at, deletedAt: gone.at }] : [];
  });
  return { samples, steps, done };
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
  const seconds = (performance.now() - start) / 1000;
  const after = follow && standIn ? { shrink: await shrink(nodes, modelId) } : {};
  return { ttfts, failed, seconds, replicas, ...after };
}

/** The shrink's table: TTFT and failures before, during and after, and each replica's drain. */
function shrinkLines(r: ShrinkResult | undefined): string[] {
  if (!r) return ["(no shrink was measured)"];
  const first = Math.min(...r.steps.map((s) => s.retiredAt));
  const last = Math.max(...r.steps.map((s) => s.deletedAt));
  const phase = (what: string, keep: (s: ShrinkSample) => boolean) => {
    const xs = r.samples.filter(keep);
    const ok = xs.flatMap((s) => (s.ms === undefined ? [] : [s.ms]));
    const cells = ok.length > 0 ? `${ms(p(ok, 0.5))} | ${ms(p(ok, 0.99))}` : "– | –";
    return `| ${what} | ${xs.length} | ${cells} | ${xs.length - ok.length} |`;
  };
  // A request sent after its replica began to retire and served there: the gateways send a retiring
  // replica none while another is ready, but one routed in the milliseconds the event takes to reach
  // its gateway can land there (and then a second later none can).
  const onRetiring = (after: number) =>
    r.samples.filter((s) =>
      r.steps.some((st) => s.instance === st.instance && s.at > st.retiredAt + after),
    ).length;
  const drains = r.steps.map((s) => `${ms(s.deletedAt - s.retiredAt)}`).join(", ");
  return [
    "| phase | requests | TTFT p50 | TTFT p99 | failed |",
    "| --- | --- | --- | --- | --- |",
    phase("3 replicas, quiet (before the first retires)", (s) => s.at < first),
    phase("shrinking (first retires to last removed)", (s) => s.at >= first && s.at <= last),
    phase("1 replica (5 s after)", (s) => s.at > last),
    "",
    r.done
      ? `Back to one replica ${((last - first) / 1000).toFixed(1)} s after the first retired, in ${r.steps.length} steps; each replica drained for ${drains} (retired to removed); requests sent after their replica began to retire and served by it: ${onRetiring(0)} (more than 1 s after: ${onRetiring(1000)}). Failures: ${
          r.samples
            .filter((s) => s.failed)
            .map((s) => s.failed)
            .join("; ") || "none"
        }.`
      : `**The set was not back to one replica within ${SHRINK_LIMIT_MS / 1000} s** (${r.steps.length} replicas removed).`,
  ];
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
    "",
    `### The shrink after the stand-in's burst: ${SHRINK_C} streams in flight until one replica is left (down window 5 s)`,
    "",
    ...shrinkLines(runs.standIn.follow.shrink),
  ].join("\n");
  console.log(body);
  await writeSection("Capacity that follows demand", body);
}

await main();
