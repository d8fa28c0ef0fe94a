// Tracing overhead: throughput, time to first token and node CPU per request through one node's
// /v1/chat/completions with tracing on versus off (switched by PUT /v1/tracing between batches, in
// rotated order), at concurrency 1 and 8, in one run against the tiny model. Target: tracing on
// keeps at least 98% of the throughput and TTFT speed of tracing off. Writes "## Tracing overhead".
import { mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { placeAndWait, seedStore, startCluster, waitForConvergence } from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";
import { machineLine, summarize, writeSection } from "../lib/report.ts";
import { TICK_MS } from "../lib/proc.ts";
import { batch, cpuMs, MAX_TOKENS, pinCores, streamOnce } from "../lib/streaming.ts";

/** Batches per mode at concurrency 1 and 8. */
const ROUNDS_1 = Number(process.env.BENCH_ROUNDS_1 ?? 400);
const ROUNDS_8 = Number(process.env.BENCH_ROUNDS_8 ?? 150);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 200);
/** Requests whose node CPU time is read as one block (a multiple of 8), and blocks per mode. */
const CPU_REQUESTS = Number(process.env.BENCH_CPU_REQUESTS ?? 160);
const CPU_BLOCKS = Number(process.env.BENCH_CPU_BLOCKS ?? 3);
const CONCURRENCY = [1, 8] as const;
const TARGET = 0.98;
/**
 * One engine thread, as in bench/gateway, and 8 slots: with llama-server's automatic 4, half of a
 * batch of 8 waits for a whole generation and the TTFT median falls between two modes.
 */
const ENGINE_ARGS = "-t 1 -tb 1 -np 8";

interface Status {
  enabled: boolean;
  written: number;
  dropped: number;
  pending: number;
  dir: string;
}

async function setTracing(node: NodeProcess, enabled: boolean): Promise<void> {
  const r = await fetch(`${node.apiUrl}/v1/tracing`, {
    method: "PUT",
    headers: { "content-type": "application/json", ...node.authHeaders },
    body: JSON.stringify({ enabled }),
  });
  if (r.status !== 200) throw new Error(`PUT /v1/tracing: ${r.status} ${await r.text()}`);
}

const MODES = ["off", "on"] as const;
type Mode = (typeof MODES)[number];

type Got = Record<Mode, { ttft: number[]; tps: number[] }>;
/** The paired figures, one per round (off and on back to back). */
interface Paired {
  ttftSpeed: number[];
  addedTtft: number[];
  throughput: number[];
}

/** Seeds the store and starts one node (engine pinned to its own core, tracing off). */
async function startBench(store: string) {
  const { modelId } = await seedStore(store);
  const env: Record<string, string> = {};
  const pinning = await pinCores(env);
  const engineArgs = process.env.BENCH_ENGINE_ARGS ?? ENGINE_ARGS;
  const cluster = await startCluster(1, {
    env,
    config: () => ({
      store_path: store,
      cluster: { heartbeat_ms: 2000, liveness_timeout_ms: 4000, election_timeout_ms: 3000 },
      engine: {
        context_size: 4096,
        extra_args: engineArgs.split(" ").filter(Boolean),
      },
      logging: { level: "warn" },
      tracing: { enabled: false },
    }),
  });
  return { modelId, pinning, engineArgs, cluster };
}

/** WARMUP requests alternating between the modes; how many were traced. */
async function warmUp(node: NodeProcess, modelId: string): Promise<number> {
  let traced = 0;
  for (let i = 0; i < WARMUP; i++) {
    const mode = MODES[i % 2]!;
    await setTracing(node, mode === "on");
    const one = await streamOnce(node.apiUrl, modelId, node.authHeaders);
    if (one.tokens === 0) throw new Error("a warm-up stream generated no content");
    if (mode === "on") traced++;
  }
  return traced;
}

/** The timed rounds at concurrency `c`: every batch's figures, the paired ratios, requests traced. */
async function timedRounds(
  c: number,
  node: NodeProcess,
  modelId: string,
): Promise<{ got: Got; paired: Paired; traced: number }> {
  let traced = 0;
  const got: Got = {
    off: { ttft: [], tps: [] },
    on: { ttft: [], tps: [] },
  };
  // Per round, the two modes' batches ran back to back: their ratio cancels slow drift.
  const paired: Paired = {
    ttftSpeed: [],
    addedTtft: [],
    throughput: [],
  };
  const reps = c === 1 ? ROUNDS_1 : ROUNDS_8;
  // Interleaved in rotated order, so drift on a shared machine hits both modes alike.
  for (let r = 0; r < reps; r++) {
    const round = {} as Record<Mode, { ttft: number; tps: number }>;
    for (let k = 0; k < MODES.length; k++) {
      const mode = MODES[(r + k) % MODES.length]!;
      await setTracing(node, mode === "on");
      const res = await batch(node.apiUrl, modelId, node.authHeaders, c);
      got[mode].ttft.push(...res.ttft);
      got[mode].tps.push(res.tokensPerSec);
      round[mode] = { ttft: summarize(res.ttft).median, tps: res.tokensPerSec };
      if (mode === "on") traced += c;
    }
    paired.ttftSpeed.push(round.off.ttft / round.on.ttft);
    paired.addedTtft.push(round.on.ttft - round.off.ttft);
    paired.throughput.push(round.on.tps / round.off.tps);
  }
  return { got, paired, traced };
}

/**
 * Node CPU per request: blocks of CPU_REQUESTS requests after the timed rounds, alternating
 * off, on, ... (CPU_BLOCKS per mode); each block's figure per mode, and the requests traced.
 */
async function cpuBlocks(
  c: number,
  node: NodeProcess,
  modelId: string,
): Promise<{ cpu: Record<Mode, number[]>; traced: number }> {
  let traced = 0;
  const cpu: Record<Mode, number[]> = { off: [], on: [] };
  for (let b = 0; b < 2 * CPU_BLOCKS; b++) {
    const mode = MODES[b % 2]!;
    await setTracing(node, mode === "on");
    const before = cpuMs({ pgid: node.pid! }).ms;
    for (let n = 0; n < CPU_REQUESTS; n += c)
      await batch(node.apiUrl, modelId, node.authHeaders, c);
    await new Promise((r) => setTimeout(r, 100)); // trace writes and task bookkeeping land
    cpu[mode].push((cpuMs({ pgid: node.pid! }).ms - before) / CPU_REQUESTS);
    if (mode === "on") traced += CPU_REQUESTS;
  }
  return { cpu, traced };
}

/** The table's row at concurrency `c`, and whether the target was met there. */
function analyzeAt(
  c: number,
  got: Got,
  paired: Paired,
  cpu: Record<Mode, number[]>,
): { row: string; met: boolean } {
  const med = (xs: number[]) => summarize(xs).median;
  const ttftSpeed = med(paired.ttftSpeed);
  const throughput = med(paired.throughput);
  const line = [
    c,
    med(got.off.ttft).toFixed(2),
    med(got.on.ttft).toFixed(2),
    med(paired.addedTtft).toFixed(2),
    `${(ttftSpeed * 100).toFixed(1)}%`,
    med(got.off.tps).toFixed(0),
    med(got.on.tps).toFixed(0),
    `${(throughput * 100).toFixed(1)}%`,
    `${med(cpu.off).toFixed(2)} (${cpu.off.map((x) => x.toFixed(2)).join(", ")})`,
    `${med(cpu.on).toFixed(2)} (${cpu.on.map((x) => x.toFixed(2)).join(", ")})`,
  ];
  return { row: `| ${line.join(" | ")} |`, met: throughput >= TARGET && ttftSpeed >= TARGET };
}

/** Tracing off, then the node's count of traces against `traced`; throws where they differ. */
async function checkTraces(
  node: NodeProcess,
  traced: number,
): Promise<{ status: Status; avgBytes: number }> {
  await setTracing(node, false);
  await new Promise((r) => setTimeout(r, 500));
  const status = await node.get<Status>("/v1/tracing");
  const files = readdirSync(status.dir).filter((f) => f.endsWith(".json"));
  const avgBytes =
    files.reduce((s, f) => s + statSync(join(status.dir, f)).size, 0) / Math.max(1, files.length);
  console.log(
    `traced requests ${traced}, trace files ${files.length}, written ${status.written}, dropped ${status.dropped}`,
  );
  if (status.written + status.dropped !== traced || files.length !== status.written)
    throw new Error(
      `expected ${traced} traces, the node wrote ${status.written} (${files.length} files)`,
    );
  return { status, avgBytes };
}

/** The Tracing overhead section of docs/benchmarks.md (or BENCH_REPORT). */
async function writeReport(r: {
  engineArgs: string;
  pinning: string;
  traced: number;
  avgBytes: number;
  status: Status;
  met: boolean;
  rows: readonly string[];
}): Promise<void> {
  const { engineArgs, pinning, traced, avgBytes, status, met, rows } = r;
  await writeSection(
    "Tracing overhead",
    `\`npm run bench tracing\` — ${machineLine()}.

Streaming chat completions (max_tokens ${MAX_TOKENS}, temperature 0) through one node's
\`/v1/chat/completions\` to its llama-server (CPU build, \`${engineArgs}\`; ${pinning}; the 0.8 MB
tiny test model: thousands of tokens/s, the worst case for per-request overhead), with tracing off
and on in the same run: \`PUT /v1/tracing\` switches it before each batch, the two modes back to back
in each round, in rotated order (${ROUNDS_1} rounds at concurrency 1, ${ROUNDS_8} at 8), after ${WARMUP} warm-up
requests alternating between the modes. Every traced request was saved: ${traced} trace files
(${(avgBytes / 1024).toFixed(1)} KiB each), ${status.dropped} dropped.

TTFT = first SSE chunk with generated content (client side), median over all requests of a mode;
tok/s = generated tokens of a batch / its wall time, median over batches. The ratios are paired: per
round, off TTFT / on TTFT (batch medians) and on tok/s / off tok/s, then the median over rounds
(which cancels the drift of a shared machine); added TTFT likewise (on − off per round). Node CPU per
request = CPU time (user + system, /proc) of the node's process group (node, its trace writer
thread and nats-server; not the engine) over blocks of ${CPU_REQUESTS} requests, ${CPU_BLOCKS} per mode alternating,
median block (every block in parentheses; ${TICK_MS} ms clock ticks, so ±${(TICK_MS / CPU_REQUESTS).toFixed(2)} ms). Target:
tracing on keeps at least ${TARGET * 100}% of the throughput and of the TTFT speed of tracing off —
${met ? "met in this run" : "**not met in this run** (see the table and the analysis below)"}.

| concurrency | TTFT off (ms) | TTFT on (ms) | added TTFT (ms, paired) | TTFT speed on/off (paired) | tok/s off | tok/s on | throughput on/off (paired) | node CPU/request off (ms) | node CPU/request on (ms) |
|---|---|---|---|---|---|---|---|---|---|
${rows.join("\n")}
`,
  );
}

async function main(): Promise<void> {
  const store = mkdtempSync(join(tmpdir(), "bench-tracing-"));
  const { modelId, pinning, engineArgs, cluster } = await startBench(store);
  try {
    const node = cluster.nodes[0]!;
    await waitForConvergence(cluster.nodes, 1);
    await placeAndWait(node, { model_id: modelId, min_nodes: 1 });
    console.log(
      `${node.apiUrl}; max_tokens ${MAX_TOKENS}; ${ROUNDS_1} batches per mode at concurrency 1, ${ROUNDS_8} at 8; ${pinning}`,
    );
    let traced = await warmUp(node, modelId);
    const rows: string[] = [];
    const verdicts: boolean[] = [];
    for (const c of CONCURRENCY) {
      const timed = await timedRounds(c, node, modelId);
      const { got, paired } = timed;
      const { cpu, traced: inBlocks } = await cpuBlocks(c, node, modelId);
      traced += timed.traced + inBlocks;
      if (process.env.BENCH_DUMP)
        writeFileSync(`${process.env.BENCH_DUMP}-c${c}.json`, JSON.stringify({ got, paired, cpu }));
      const { row, met } = analyzeAt(c, got, paired, cpu);
      verdicts.push(met);
      console.log(row);
      rows.push(row);
    }
    const { status, avgBytes } = await checkTraces(node, traced);
    const met = verdicts.every(Boolean);
    await writeReport({ engineArgs, pinning, traced, avgBytes, status, met, rows });
    console.log("wrote its Tracing overhead section of docs/benchmarks.md");
  } finally {
    await cluster.stop();
    rmSync(store, { recursive: true, force: true });
  }
}

await main();
