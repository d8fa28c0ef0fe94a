// `npm run bench workload`: every workload shape (shapes.ts) once open loop (Poisson session
// arrivals) and once closed loop (BENCH_USERS clients, default 4), on a 2-node cluster of the wide
// model with the default routing (bench/workload/cluster.ts), reporting goodput at the SLO, TTFT
// and ITL p50/p99, tokens per second and the engines' cache hit rate. With BENCH_URLS (comma-
// separated gateways), BENCH_MODEL and BENCH_TOKEN it drives a running cluster instead. bench/routing
// compares the routing modes on the same shapes. Reports only.
import { machineLine, writeSection } from "../lib/report.ts";
import { startBenchCluster } from "./cluster.ts";
import type { Target } from "./load.ts";
import { describeParams, RATES, runShape, SLO } from "./plan.ts";
import type { ShapeRun } from "./plan.ts";
import { SHAPES } from "./shapes.ts";

const USERS = Number(process.env.BENCH_USERS ?? 4);

async function runAll(target: Target): Promise<ShapeRun[]> {
  const out: ShapeRun[] = [];
  for (const [k, shape] of SHAPES.entries()) {
    out.push(await runShape(target, shape, 100 + k, { kind: "open", rate: RATES[shape], seed: 1 }));
    out.push(await runShape(target, shape, 200 + k, { kind: "closed", users: USERS }));
    for (const r of out.slice(-2))
      console.log(`${shape} ${r.arrival.kind}: ${JSON.stringify(r.summary)}`);
  }
  return out;
}

let runs: ShapeRun[];
let where: string;
if (process.env.BENCH_URLS) {
  runs = await runAll({
    baseUrls: process.env.BENCH_URLS.split(","),
    model: process.env.BENCH_MODEL ?? "",
    headers: process.env.BENCH_TOKEN ? { authorization: `Bearer ${process.env.BENCH_TOKEN}` } : {},
  });
  where = `against ${process.env.BENCH_URLS} (${process.env.BENCH_MODEL})`;
} else {
  await using c = await startBenchCluster({
    nodes: 2,
    slots: 4,
    slotContext: 4096,
    prefixRouting: "cache",
  });
  runs = await runAll(c.target);
  where =
    "2 nodes (loopback), the wide model with one replica per node, each llama-server on one thread with 4 slots and `--cache-ram 0`, routing `cache` (the default)";
}
const f = (x: number) => (Number.isFinite(x) ? x.toFixed(0) : "–");
const body = [
  `Command: \`npm run bench workload\`. ${machineLine()}. ${where}. Open loop: sessions at Poisson arrivals at each shape's rate; closed loop: ${USERS} clients, each starting its next session when its last ends. Goodput at TTFT ≤ ${SLO.ttftMs} ms and time per output token ≤ ${SLO.tpotMs} ms.`,
  "",
  describeParams(),
  "",
  "| shape | arrivals | requests | errors | goodput req/s | SLO met | TTFT p50 / p99 ms | ITL p50 / p99 ms | tokens/s | cache hit rate |",
  "|---|---|---|---|---|---|---|---|---|---|",
  ...runs.map((r) => {
    const s = r.summary;
    const arrivals =
      r.arrival.kind === "open" ? `open, ${r.arrival.rate}/s` : `closed, ${USERS} users`;
    return `| ${r.shape} | ${arrivals} | ${s.requests} | ${s.errors} | ${s.goodput.toFixed(2)} | ${(s.sloMet * 100).toFixed(0)}% | ${f(s.ttftP50)} / ${f(s.ttftP99)} | ${f(s.itlP50)} / ${f(s.itlP99)} | ${s.tokensPerS.toFixed(1)} | ${(s.cacheHitRate * 100).toFixed(0)}% |`;
  }),
].join("\n");
console.log(body);
await writeSection("Workload shapes (bench/workload)", body);
