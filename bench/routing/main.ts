// Routing on the workloads people run (issue 48, item 3): 2 nodes (BENCH_NODES, 2 to 4), the wide
// model with one replica per node, each llama-server on one thread keeping 4 prompts
// (bench/workload/cluster.ts), and the four shapes of bench/workload, each run open loop through the
// gateways in turn. Three routing modes, each on a fresh cluster in the same run: `off` (least
// outstanding requests, the baseline), `hash` (the leading messages' hash with bounded loads) and
// `cache` (the gateways' prompt-cache maps). Every mode runs the same prompts (BENCH_RUNS runs,
// default 5, each with prompts of its own, so each run starts cold). Reports TTFT, goodput and the
// engines' cache hit rate per shape and mode, the ratios against `off` per run with their spread, and
// the maps' predicted against the engines' reused tokens (ic_prompt_cache_*). BENCH_SAMPLES=<file>
// appends every request's figures there as JSON lines. Reports only.
import { appendFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { machineLine, writeSection } from "../lib/report.ts";
import { startBenchCluster } from "../workload/cluster.ts";
import { describeParams, RATES, runShape } from "../workload/plan.ts";
import type { ShapeRun } from "../workload/plan.ts";
import type { ShapeName } from "../workload/shapes.ts";
import { percentile } from "../workload/summary.ts";

const RUNS = Number(process.env.BENCH_RUNS ?? 5);
type Mode = "off" | "hash" | "cache";
const MODES = (process.env.BENCH_MODES ?? "off,hash,cache").split(",") as Mode[];
const SHAPES = (process.env.BENCH_SHAPES ?? "shared-prefix,multi-turn,agent,sharegpt").split(
  ",",
) as ShapeName[];
/** Replicas, one per node (the issue's 2 to 4); the report of each count is a section of its own. */
const NODES = Number(process.env.BENCH_NODES ?? 2);
if (!Number.isInteger(NODES) || NODES < 2 || NODES > 4) throw new Error("BENCH_NODES: 2, 3 or 4");
const CLUSTER = { nodes: NODES, slots: 4, slotContext: 4096 } as const;

/** The sum over nodes of the ic_prompt_cache_* counters named. */
async function cacheCounters(urls: readonly string[], headers: Record<string, string>) {
  const sums = { predicted: 0, cached: 0, error: 0, prompt: 0 };
  for (const url of urls) {
    const text = await (await fetch(`${url}/metrics`, { headers })).text();
    for (const line of text.split("\n")) {
      const m =
        /^ic_prompt_cache_(predicted|cached|error|prompt)_tokens_total\{[^}]*\} (\S+)$/.exec(line);
      if (m) sums[m[1] as keyof typeof sums] += Number(m[2]);
    }
  }
  return sums;
}

const results = new Map<string, ShapeRun[]>();
const maps = new Map<Mode, Awaited<ReturnType<typeof cacheCounters>>>();
for (const mode of MODES) {
  await using c = await startBenchCluster({ ...CLUSTER, prefixRouting: mode });
  for (let run = 1; run <= RUNS; run++)
    for (const [k, shape] of SHAPES.entries()) {
      const r = await runShape(c.target, shape, run * 10 + k, {
        kind: "open",
        rate: RATES[shape],
        seed: run,
      });
      const key = `${mode}/${shape}`;
      if (process.env.BENCH_SAMPLES)
        appendFileSync(
          process.env.BENCH_SAMPLES,
          `${JSON.stringify({ mode, run, shape, samples: r.samples })}\n`,
        );
      results.set(key, [...(results.get(key) ?? []), r]);
      const s = r.summary;
      console.log(
        `${mode} run ${run} ${shape}: TTFT p50 ${s.ttftP50.toFixed(0)} ms, goodput ${s.goodput.toFixed(2)}/s, hit ${(s.cacheHitRate * 100).toFixed(0)}%, errors ${s.errors}, split ${r.split.join("/")}`,
      );
    }
  maps.set(mode, await cacheCounters(c.target.baseUrls, c.target.headers));
}

const med = (xs: number[]) => percentile(xs, 0.5);
const spread = (xs: number[], f: (x: number) => string) =>
  `${f(med(xs))} (${f(Math.min(...xs))}–${f(Math.max(...xs))})`;
const ms = (x: number) => x.toFixed(0);
const x2 = (x: number) => `${x.toFixed(2)}×`;

const command = [
  ...["BENCH_NODES", "BENCH_MODES", "BENCH_SHAPES", "BENCH_RUNS"]
    .filter((k) => process.env[k] !== undefined)
    .map((k) => `${k}=${process.env[k]}`),
  "npm run bench routing",
].join(" ");
const cores = availableParallelism();
const lines: string[] = [
  `Command: \`${command}\`. ${machineLine()}. ${CLUSTER.nodes} nodes (loopback), the wide model (F16, 384 wide, 6 layers) with one replica per node, each llama-server on one thread with ${CLUSTER.slots} slots of ${CLUSTER.slotContext} tokens and \`--cache-ram 0\` (each replica keeps ${CLUSTER.slots} prompts: the working sets below fit the cluster, not one replica, as on a GPU whose KV room holds a few long prompts)${cores < NODES ? `; ${NODES} engines share the machine's ${cores} cores, so a prompt computed on one replica slows the others, which it would not on a GPU each` : ""}. Requests go to the ${CLUSTER.nodes} gateways in turn. Each mode on a fresh cluster in the same run, ${RUNS} runs per shape, each run with prompts of its own (a cold cache), the same prompts in every mode. Shapes (bench/workload):`,
  "",
  describeParams(),
  "",
  "Per shape and mode: the median over runs (min–max) of each run's figure.",
  "",
  "| shape | routing | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | goodput req/s | SLO met | cache hit rate | requests per replica (run 1) |",
  "|---|---|---|---|---|---|---|---|---|",
];
for (const shape of SHAPES)
  for (const mode of MODES) {
    const rs = results.get(`${mode}/${shape}`) ?? [];
    const s = rs.map((r) => r.summary);
    lines.push(
      `| ${shape} | ${mode} | ${spread(
        s.map((x) => x.ttftP50),
        ms,
      )} | ${spread(
        s.map((x) => x.ttftP99),
        ms,
      )} | ${ms(med(s.map((x) => x.itlP50)))} | ${spread(
        s.map((x) => x.goodput),
        (x) => x.toFixed(2),
      )} | ${(med(s.map((x) => x.sloMet)) * 100).toFixed(0)}% | ${spread(
        s.map((x) => x.cacheHitRate * 100),
        (x) => `${x.toFixed(0)}%`,
      )} | ${rs[0]?.split.join(" / ") ?? ""} |`,
    );
  }
lines.push(
  "",
  "Ratios against `off` in the same run index (TTFT p50: off ÷ mode, lower is better for the mode; goodput: mode ÷ off): median (min–max) over the runs.",
  "",
  "| shape | routing | TTFT p50 ratio | goodput ratio |",
  "|---|---|---|---|",
);
for (const shape of SHAPES)
  for (const mode of MODES.filter((m) => m !== "off")) {
    const base = results.get(`off/${shape}`) ?? [];
    const rs = results.get(`${mode}/${shape}`) ?? [];
    if (rs.length === 0 || base.length === 0) continue;
    const ttft = rs.map((r, i) => base[i]!.summary.ttftP50 / r.summary.ttftP50);
    const good = rs.map((r, i) => r.summary.goodput / Math.max(1e-9, base[i]!.summary.goodput));
    lines.push(`| ${shape} | ${mode} | **${spread(ttft, x2)}** | ${spread(good, x2)} |`);
  }
const cache = maps.get("cache");
if (cache)
  lines.push(
    "",
    `The gateways' prompt-cache maps in the \`cache\` cluster, over all its requests (ic_prompt_cache_*, summed over the ${CLUSTER.nodes} gateways): predicted ${cache.predicted} reused prompt tokens, the engines reported ${cache.cached} reused of ${cache.prompt} (predicted ÷ reused ${(cache.predicted / Math.max(1, cache.cached)).toFixed(2)}), with a summed per-request error of ${cache.error} tokens (${((cache.error / Math.max(1, cache.cached)) * 100).toFixed(0)}% of the reused).`,
  );
const body = lines.join("\n");
console.log(body);
await writeSection(
  NODES === 2
    ? "Routing on workload shapes (bench/routing)"
    : `Routing on workload shapes, ${NODES} replicas (bench/routing)`,
  body,
);
