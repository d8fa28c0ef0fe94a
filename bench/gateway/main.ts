// Gateway overhead against its floor: tokens/s and time to first token through a node's
// /v1/chat/completions versus a bare Node pass-through proxy on the same core (the floor of any Node
// hop on this machine) and the llama-server called directly, at concurrency 1 and 16, in one run.
// Targets (TARGETS): at concurrency 1 the gateway keeps >= 98% of the floor's throughput and adds
// <= 0.5 ms of TTFT (issue 32); at 16, >= 98% and within 1 ms of the floor's TTFT, with at most 1.3x its
// CPU per request (issue 48). Writes "## Gateway (tiny model)", "## Gateway (wide model)" or the
// stand-in's section.
import { spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import {
  engineKeyOf,
  placeAndWait,
  seedStore,
  startCluster,
  waitForConvergence,
} from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";
import { machineLine, summarize, writeSection } from "../lib/report.ts";
import { STAND_IN, standInDevices, standInsOn } from "../lib/stand-in.ts";
import {
  batch,
  cpuDelta,
  hopProcesses,
  MAX_TOKENS,
  pinCores,
  streamOnce,
  threadCpu,
} from "../lib/streaming.ts";

/** Rounds per pass at concurrency 1 and at 16; each round runs one batch per path. */
const ROUNDS_1 = Number(process.env.BENCH_ROUNDS_1 ?? 60);
const ROUNDS_16 = Number(process.env.BENCH_ROUNDS_16 ?? 12);
/** Times the rounds are repeated; the spread of the per-pass figures is reported. */
const PASSES = Number(process.env.BENCH_PASSES ?? 3);
/** Requests per path before measuring: the node's JavaScript runs optimized only after many calls. */
const WARMUP = Number(process.env.BENCH_WARMUP ?? 500);
/** How long the hops' idle CPU rate is read, before the warm-up and after the last pass. */
const IDLE_MS = 3000;

/**
 * One engine thread, and a slot per request of the concurrency-16 batch: with llama-server's automatic
 * 4 slots, a batch of 16 runs in four waves and its median TTFT falls on the boundary between the
 * second and the third (tens of ms apart), which swamped the gateway's own part of it.
 */
const ENGINE_ARGS = "-t 1 -tb 1 -np 16";

/**
 * The targets against the bare Node proxy (the floor), per concurrency: the throughput ratio, the TTFT
 * added to the floor's, and the CPU per request as a multiple of the floor's. Concurrency 1: issue 32;
 * 16: issue 48 (a burst of 16 streams starting together, as on a GPU).
 */
const TARGETS: Record<number, { throughput: number; ttftMs: number; cpuRatio: number }> = {
  1: { throughput: 0.98, ttftMs: 0.5, cpuRatio: 1.5 },
  16: { throughput: 0.98, ttftMs: 1, cpuRatio: 1.3 },
};

/**
 * BENCH_ENGINE=stand-in: bench/lib/stand-in-engine.mjs instead of llama-server, streaming
 * BENCH_STAND_IN_TPS tokens per second per stream (3000 by default: a GPU's rate), so the engine's
 * own speed leaves our path exposed.
 */
const STAND_IN_MODE = process.env.BENCH_ENGINE === "stand-in";
const STAND_IN_TPS = Number(process.env.BENCH_STAND_IN_TPS ?? 3000);

const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;

/** CPU ms per wall ms of each hop while no request runs (heartbeats, telemetry, timers). */
async function idleCpuRates(hops: readonly (readonly number[])[]): Promise<number[]> {
  // Work the last requests left behind (task reports, the event log's write) lands first.
  await new Promise((r) => setTimeout(r, 500));
  const before = hops.map((pids) => threadCpu(pids));
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, IDLE_MS));
  const wall = performance.now() - t0;
  return hops.map((pids, k) => cpuDelta(before[k]!, threadCpu(pids)) / wall);
}

/** Starts floor-proxy.mjs in front of `upstream`; resolves with its URL and the process. */
async function startFloorProxy(upstream: string): Promise<{ url: string; proc: ChildProcess }> {
  const script = join(dirname(fileURLToPath(import.meta.url)), "floor-proxy.mjs");
  const prof = process.env.BENCH_PROFILE;
  const args = prof
    ? ["--cpu-prof", `--cpu-prof-dir=${prof}`, "--cpu-prof-name=floor-proxy.cpuprofile"]
    : [];
  const proc = spawn(process.execPath, [...args, script, upstream], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const port = await new Promise<string>((resolve, reject) => {
    let out = "";
    proc.stdout!.on("data", (c: Buffer) => {
      out += c.toString();
      if (out.includes("\n")) resolve(out.trim());
    });
    proc.once("exit", (code) => reject(new Error(`floor proxy exited (${code})`)));
  });
  return { url: `http://127.0.0.1:${port}`, proc };
}

/** The three paths' indexes: the floor proxy and the gateway; and nats-server's among the hops. */
const FLOOR = 1;
const GATEWAY = 2;
const NATS = 2;

interface Path {
  name: string;
  url: string;
  headers: Record<string, string>;
}

interface Pass {
  ratio: number;
  delta: number;
  /** CPU ms of each hop over the pass's rounds (idle not yet removed) and the rounds' wall ms. */
  cpu: number[];
  wall: number;
  requests: number;
}

/** Every pass at one concurrency: each path's TTFTs and tok/s, and gateway vs floor per round. */
interface AtConcurrency {
  c: number;
  got: { ttft: number[]; tps: number[] }[];
  ratios: number[];
  deltas: number[];
  passes: Pass[];
}

/** Seeds the store and starts one node (engine pinned to its own core). */
async function startBench(store: string) {
  const wide = process.env.BENCH_MODEL === "wide";
  const { modelId } = await seedStore(store, { slow: wide });
  const env: Record<string, string> = {};
  // pinCores wraps the engine it finds (SERVICE_ENGINE_SERVER_BIN first) to pin it to its core.
  if (STAND_IN_MODE) {
    process.env.SERVICE_ENGINE_SERVER_BIN = STAND_IN;
    // On a GPU machine the stand-in claims its GPUs (a node there refuses a CPU-only engine).
    const devices = standInDevices();
    if (devices) env.STAND_IN_DEVICES = devices;
  }
  const pinning = await pinCores(env);
  const engineArgs = STAND_IN_MODE
    ? ["--stand-in-tps", String(STAND_IN_TPS)]
    : (process.env.BENCH_ENGINE_ARGS ?? ENGINE_ARGS).split(" ").filter(Boolean);
  const cluster = await startCluster(1, {
    env,
    ...(process.env.BENCH_PROFILE
      ? { nodeArgs: ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_PROFILE}`] }
      : {}),
    config: () => ({
      store_path: store,
      cluster: { heartbeat_ms: 2000, liveness_timeout_ms: 4000, election_timeout_ms: 3000 },
      engine: {
        context_size: 4096,
        extra_args: engineArgs,
      },
      logging: { level: "warn" },
    }),
  });
  return { wide, modelId, pinning, cluster };
}

/** Places the model on the node; the URL of its llama-server (rank 0's endpoint). */
async function placeEngine(node: NodeProcess, modelId: string): Promise<string> {
  const inst = await placeAndWait(node, { model_id: modelId, min_nodes: 1 });
  const s = await node.get<{
    instances: { instance_id: string; runners: { rank: number; endpoint?: string }[] }[];
  }>("/state");
  return s.instances
    .find((i) => i.instance_id === inst.instance_id)!
    .runners.find((r) => r.rank === 0)!.endpoint!;
}

/** The three paths, the hops whose CPU is read, and the node's processes by name and count. */
function pathsAndHops(
  node: NodeProcess,
  direct: string,
  floor: { url: string; proc: ChildProcess },
): { paths: Path[]; hops: number[][]; counted: string } {
  const floorPid = floor.proc.pid!;
  const nodePgid = node.pid!;
  // The engine takes only its API key (its node made it; the gateway adds it itself): read off
  // the engine's process.
  const port = new URL(direct).port;
  const key = STAND_IN_MODE
    ? standInsOn([new URL(direct).hostname]).find((e) => e.port === Number(port))?.key
    : engineKeyOf(port, new URL(direct).hostname);
  const engineAuth = { authorization: `Bearer ${key}` };
  const paths = [
    {
      name: STAND_IN_MODE ? "direct stand-in engine" : "direct llama-server",
      url: direct,
      headers: engineAuth,
    },
    { name: "bare Node proxy (floor)", url: floor.url, headers: engineAuth },
    { name: "gateway", url: node.apiUrl, headers: node.authHeaders },
  ];
  // CPU of the hops: the proxy process; the node's process group (the node, its supervising
  // parent and its nats-server; the engine excluded), nats-server also on its own.
  const nodeProcs = hopProcesses({ pgid: nodePgid });
  const hops = [
    [floorPid],
    nodeProcs.map((p) => p.pid),
    nodeProcs.filter((p) => p.name === "nats-server").map((p) => p.pid),
  ];
  const names = nodeProcs.map((p) => p.name);
  // Names with their counts, e.g. "2 × node, nats-server".
  const counted = [...new Set(names)]
    .map((n) => {
      const k = names.filter((x) => x === n).length;
      return k > 1 ? `${k} × ${n}` : n;
    })
    .join(", ");
  return { paths, hops, counted };
}

/** WARMUP requests per path (the first ten checked against JSON.parse). */
async function warmUp(paths: readonly Path[], modelId: string): Promise<void> {
  for (let i = 0; i < WARMUP; i++) {
    for (const p of paths) {
      const one = await streamOnce(p.url, modelId, p.headers, i < 10);
      if (one.tokens === 0)
        throw new Error(`a warm-up stream through ${p.name} generated no content`);
    }
  }
}

/** What every round runs against: the paths, the hops' pids (read for CPU), and the model. */
interface RoundTargets {
  paths: readonly Path[];
  hops: readonly number[][];
  modelId: string;
}

/** What the rounds of a pass add to: each path's TTFTs and tok/s, and each hop's CPU ms. */
interface RoundTally {
  got: AtConcurrency["got"];
  cpu: number[];
}

/**
 * One round: a batch of `c` per path, in an order rotated by `r`; adds to `got` and to each hop's
 * `cpu`. The hops' CPU is read around the whole round: work a request leaves behind (the task's
 * bookkeeping after the last byte) lands in it too, and the hops do nothing for the other paths.
 */
async function runRound(
  r: number,
  c: number,
  { paths, hops, modelId }: RoundTargets,
  { got, cpu }: RoundTally,
): Promise<{ wall: number; ratio: number; delta: number }> {
  const round: { ttft: number; tps: number }[] = [];
  const before = hops.map((pids) => threadCpu(pids));
  const t0 = performance.now();
  for (let k = 0; k < paths.length; k++) {
    const at = (r + k) % paths.length;
    const res = await batch(paths[at]!.url, modelId, paths[at]!.headers, c);
    got[at]!.ttft.push(...res.ttft);
    got[at]!.tps.push(res.tokensPerSec);
    round[at] = { ttft: summarize(res.ttft).median, tps: res.tokensPerSec };
  }
  const wall = performance.now() - t0;
  hops.forEach((pids, k) => (cpu[k]! += cpuDelta(before[k]!, threadCpu(pids))));
  return {
    wall,
    ratio: round[GATEWAY]!.tps / round[FLOOR]!.tps,
    delta: round[GATEWAY]!.ttft - round[FLOOR]!.ttft,
  };
}

/** PASSES passes of rounds at concurrency `c`. */
async function measureAt(
  c: number,
  paths: readonly Path[],
  hops: readonly number[][],
  modelId: string,
): Promise<AtConcurrency> {
  const got = paths.map(() => ({ ttft: [] as number[], tps: [] as number[] }));
  /** Per round, gateway vs floor in the same round: tok/s ratio and median-TTFT difference. */
  const ratios: number[] = [];
  const deltas: number[] = [];
  const passes: Pass[] = [];
  const reps = c === 1 ? ROUNDS_1 : ROUNDS_16;
  for (let pass = 0; pass < PASSES; pass++) {
    const from = ratios.length;
    const cpu = hops.map(() => 0);
    let wall = 0;
    // Interleaved, each round in a rotated order, so drift on a shared machine hits all paths
    // alike.
    for (let r = 0; r < reps; r++) {
      const one = await runRound(r, c, { paths, hops, modelId }, { got, cpu });
      wall += one.wall;
      ratios.push(one.ratio);
      deltas.push(one.delta);
    }
    passes.push({
      ratio: summarize(ratios.slice(from)).median,
      delta: summarize(deltas.slice(from)).median,
      cpu,
      wall,
      requests: reps * c,
    });
  }
  return { c, got, ratios, deltas, passes };
}

/** The per-path rows at one concurrency: TTFT, tok/s, against direct, and the hops' CPU. */
function pathRows(
  at: AtConcurrency,
  perRequest: readonly number[][],
  paths: readonly Path[],
  label: string,
): string[] {
  const { c, got } = at;
  const rows: string[] = [];
  const cpuMed = [0, 1, NATS].map((k) => summarize(perRequest.map((x) => x[k]!)).median);
  const ttft = got.map((g) => summarize(g.ttft).median);
  const tps = got.map((g) => summarize(g.tps).median);
  const cpuCell = (k: number) =>
    k === FLOOR
      ? cpuMed[0]!.toFixed(2)
      : k === GATEWAY
        ? `${cpuMed[1]!.toFixed(2)} (nats-server ${cpuMed[2]!.toFixed(2)})`
        : "";
  paths.forEach((p, k) => {
    const line =
      k === 0
        ? `| ${label} | ${c} | ${p.name} | ${ttft[0]!.toFixed(2)} | | ${tps[0]!.toFixed(0)} | | |`
        : `| ${label} | ${c} | ${p.name} | ${ttft[k]!.toFixed(2)} | ${(ttft[k]! - ttft[0]!).toFixed(2)} | ${tps[k]!.toFixed(0)} | ${pct(tps[k]! / tps[0]!)} | ${cpuCell(k)} |`;
    console.log(line);
    rows.push(line);
  });
  return rows;
}

/** The target row at one concurrency: gateway vs floor, with the range of the passes. */
function targetRow(
  at: AtConcurrency,
  perRequest: readonly number[][],
  label: string,
): {
  line: string;
  verdict: { c: number; throughputMet: boolean; ttftMet: boolean; cpuMet: boolean };
} {
  const { c, ratios, deltas, passes } = at;
  const target = TARGETS[c]!;
  const cpuDiff = summarize(perRequest.map((x) => x[1]! - x[0]!)).median;
  const cpuRatio = summarize(perRequest.map((x) => x[1]! / x[0]!)).median;
  const cpuMet = cpuRatio <= target.cpuRatio;
  const ratio = summarize(ratios).median;
  const delta = summarize(deltas).median;
  const throughputMet = ratio >= target.throughput;
  const ttftMet = delta <= target.ttftMs;
  const met = (ok: boolean, what: string) => `${ok ? "met" : "**not met**"} (${what})`;
  const range = (xs: number[], f: (x: number) => string) =>
    xs.length > 1 ? ` (passes ${f(Math.min(...xs))} – ${f(Math.max(...xs))})` : "";
  const ms = (x: number) => x.toFixed(2);
  const line = `| ${label} | ${c} | ${pct(ratio)}${range(
    passes.map((p) => p.ratio),
    pct,
  )} | ${met(throughputMet, `≥ ${pct(target.throughput)}`)} | ${ms(delta)}${range(
    passes.map((p) => p.delta),
    ms,
  )} | ${met(ttftMet, `≤ ${target.ttftMs} ms`)} | ${ms(cpuDiff)}${range(
    perRequest.map((x) => x[1]! - x[0]!),
    ms,
  )} | ${cpuRatio.toFixed(2)}×${range(
    perRequest.map((x) => x[1]! / x[0]!),
    (x) => `${x.toFixed(2)}×`,
  )} | ${met(cpuMet, `≤ ${target.cpuRatio}×`)} |`;
  console.log(line);
  return { line, verdict: { c, throughputMet, ttftMet, cpuMet } };
}

/** Both tables' rows, and the verdict against the target, from every concurrency's passes. */
function analyze(
  byConcurrency: readonly AtConcurrency[],
  idle: readonly number[],
  paths: readonly Path[],
  label: string,
): { rows: string[]; targetRows: string[]; verdict: string } {
  const rows: string[] = [];
  const targetRows: string[] = [];
  const verdicts: { c: number; throughputMet: boolean; ttftMet: boolean; cpuMet: boolean }[] = [];
  for (const at of byConcurrency) {
    const { c, passes } = at;
    /** Per pass, CPU ms per request of the floor, the node (with nats-server) and nats-server. */
    const perRequest = passes.map((p) =>
      p.cpu.map((ms, k) => (ms - idle[k]! * p.wall) / p.requests),
    );
    passes.forEach((p, i) =>
      console.log(
        `c=${c} pass ${i + 1}: gateway/floor ${pct(p.ratio)}, TTFT gateway - floor ${p.delta.toFixed(2)} ms; hop CPU per request: floor ${perRequest[i]![0]!.toFixed(2)} ms, gateway ${perRequest[i]![1]!.toFixed(2)} ms (nats-server ${perRequest[i]![NATS]!.toFixed(2)})`,
      ),
    );
    rows.push(...pathRows(at, perRequest, paths, label));
    const target = targetRow(at, perRequest, label);
    verdicts.push(target.verdict);
    targetRows.push(target.line);
  }
  const missed = verdicts.flatMap((v) => [
    ...(v.throughputMet ? [] : [`throughput at concurrency ${v.c}`]),
    ...(v.ttftMet ? [] : [`TTFT at concurrency ${v.c}`]),
    ...(v.cpuMet ? [] : [`CPU per request at concurrency ${v.c}`]),
  ]);
  const verdict =
    missed.length === 0
      ? "**met in this run** at both concurrencies"
      : `**not met in this run**: ${missed.join(", ")}`;
  return { rows, targetRows, verdict };
}

/** What the engine was, in the report's words. */
function engineLine(wide: boolean, pinning: string): string {
  if (STAND_IN_MODE)
    return `the stand-in engine (bench/lib/stand-in-engine.mjs, started by the node as its llama-server: ${STAND_IN_TPS} tokens/s per stream, one SSE event per token in llama-server's shapes, no model; ${pinning}`;
  return `one llama-server (CPU build, \`${process.env.BENCH_ENGINE_ARGS ?? ENGINE_ARGS}\`: one thread, a slot for each of 16 concurrent requests; ${pinning}; ${wide ? "the wide test model: 384 wide, 6 layers, F16" : "the 0.8 MB tiny test model: thousands of tokens/s, the worst case for per-chunk overhead"}`;
}

/** The Gateway section of docs/benchmarks.md (or BENCH_REPORT). */
async function writeReport(r: {
  wide: boolean;
  pinning: string;
  verdict: string;
  targetRows: readonly string[];
  rows: readonly string[];
  idle: readonly number[];
  counted: string;
}): Promise<void> {
  const { wide, pinning, verdict, targetRows, rows, idle, counted } = r;
  await writeSection(
    STAND_IN_MODE
      ? "Gateway (stand-in engine at GPU token rates)"
      : wide
        ? "Gateway (wide model)"
        : "Gateway (tiny model)",
    `\`${STAND_IN_MODE ? `BENCH_ENGINE=stand-in BENCH_STAND_IN_TPS=${STAND_IN_TPS} ` : wide ? "BENCH_MODEL=wide " : ""}npm run bench gateway\` — ${machineLine()}.

Streaming chat completions (max_tokens ${MAX_TOKENS}, temperature 0) against ${engineLine(wide, pinning)}), called directly, through a
bare Node proxy and through a node's \`/v1/chat/completions\` (task creation through the master, SSE
pass-through with id rewriting). The bare proxy (\`bench/gateway/floor-proxy.mjs\`: node:http
pass-through, no validation, task or bus, its own process on the node's core) is the floor of any
Node hop here, and the targets are stated against it: **the gateway keeps at least ${pct(TARGETS[1]!.throughput)} of the
floor's throughput, adds at most ${TARGETS[1]!.ttftMs} ms of TTFT to it and uses at most ${TARGETS[1]!.cpuRatio}× its CPU per request at
concurrency 1 (issue 32); at 16, at least ${pct(TARGETS[16]!.throughput)}, within ${TARGETS[16]!.ttftMs} ms and at most ${TARGETS[16]!.cpuRatio}× (issue 48)** — ${verdict}.

${PASSES} passes, each of ${ROUNDS_1} rounds at concurrency 1 and ${ROUNDS_16} at 16 (one batch per path per round, in
rotated order, so drift on the shared machine hits all paths alike), after ${WARMUP} warm-up requests
per path. The client is a keep-alive node:http client that finds content chunks by string search
(checked against JSON.parse during warm-up), to keep its own CPU off the shared core.

Against the floor (the target): throughput = median over all rounds of gateway tok/s ÷ floor tok/s
in the same round; TTFT = median over all rounds of the gateway's median TTFT − the floor's in the
same round; hop CPU = the hops' CPU per request (below), gateway − floor. In brackets the range of
the per-pass figures (the noise between passes).

| model | concurrency | throughput gateway ÷ floor | target | TTFT gateway − floor (ms) | target | hop CPU per request, gateway − floor (ms) | hop CPU per request, gateway ÷ floor | target |
|---|---|---|---|---|---|---|---|---|
${targetRows.join("\n")}

The direct figures, for context: TTFT = first SSE chunk with generated content, median over all
requests; tokens/s = generated tokens of a batch / its wall time, median over batches. Hop CPU per
request = time on a CPU of every thread of the hop's processes (\`/proc/<pid>/task/*/schedstat\`,
ns) over each round, all three paths' batches included (a hop works only for its own path), less
its idle rate × the rounds' wall time (without requests, after the warm-up and after the rounds: proxy
${(idle[0]! * 1000).toFixed(1)} ms/s, node ${(idle[1]! * 1000).toFixed(1)} ms/s), per request; median over the passes. For the gateway: the node and
its nats-server (${counted}; the engine excluded; the nats-server's share in brackets).

| model | concurrency | path | TTFT (ms) | added vs direct (ms) | tok/s | throughput vs direct | hop CPU per request (ms) |
|---|---|---|---|---|---|---|---|
${rows.join("\n")}
`,
  );
}

async function main(): Promise<void> {
  const store = mkdtempSync(join(tmpdir(), "bench-gw-"));
  const { wide, modelId, pinning, cluster } = await startBench(store);
  let floor: { url: string; proc: ChildProcess } | undefined;
  try {
    const node = cluster.nodes[0]!;
    await waitForConvergence(cluster.nodes, 1);
    const direct = await placeEngine(node, modelId);
    floor = await startFloorProxy(direct);
    const { paths, hops, counted } = pathsAndHops(node, direct, floor);
    await warmUp(paths, modelId);
    // After the warm-up: right after start the node is still compiling and settling.
    const idleBefore = await idleCpuRates(hops);
    console.log(
      `${paths.map((p) => `${p.name} ${p.url}`).join(", ")}; max_tokens ${MAX_TOKENS}; ${PASSES} passes of ${ROUNDS_1} rounds at concurrency 1 and ${ROUNDS_16} at 16; ${pinning}; idle CPU ms/s: floor ${(idleBefore[0]! * 1000).toFixed(1)}, node ${(idleBefore[1]! * 1000).toFixed(1)} (nats-server ${(idleBefore[2]! * 1000).toFixed(1)})`,
    );
    const byConcurrency: AtConcurrency[] = [];
    for (const c of [1, 16]) byConcurrency.push(await measureAt(c, paths, hops, modelId));
    // The idle rate again after the rounds; their mean is taken off each hop's CPU.
    const idleAfter = await idleCpuRates(hops);
    const idle = hops.map((_, k) => (idleBefore[k]! + idleAfter[k]!) / 2);
    const label = STAND_IN_MODE
      ? `stand-in (${STAND_IN_TPS} tok/s)`
      : wide
        ? "wide (30 MB)"
        : "tiny (0.8 MB)";
    const { rows, targetRows, verdict } = analyze(byConcurrency, idle, paths, label);
    await writeReport({ wide, pinning, verdict, targetRows, rows, idle, counted });
    console.log(`wrote its Gateway section of ${process.env.BENCH_REPORT ?? "docs/benchmarks.md"}`);
  } finally {
    // SIGINT: the proxy exits through its handler, so a --cpu-prof profile is written.
    floor?.proc.kill("SIGINT");
    await cluster.stop();
    rmSync(store, { recursive: true, force: true });
  }
}

await main();
