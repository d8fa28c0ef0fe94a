// Gateway overhead against its floor: tokens/s and time to first token through a node's
// /v1/chat/completions versus a bare Node pass-through proxy on the same core (the floor of any Node
// hop on this machine) and the llama-server called directly, at concurrency 1 and 16, in one run.
// Targets (settings.ts TARGETS): at concurrency 1 the gateway keeps >= 98% of the floor's throughput and adds
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
import { summarize } from "../lib/report.ts";
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
import { analyze, writeReport } from "./report.ts";
import {
  ENGINE_ARGS,
  FLOOR,
  GATEWAY,
  IDLE_MS,
  PASSES,
  ROUNDS_1,
  ROUNDS_16,
  STAND_IN_MODE,
  STAND_IN_TPS,
  WARMUP,
} from "./settings.ts";
import type { AtConcurrency, Pass, Path } from "./settings.ts";

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
  cpuMain: number[];
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
  { got, cpu, cpuMain }: RoundTally,
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
  hops.forEach((pids, k) => {
    const after = threadCpu(pids);
    cpu[k]! += cpuDelta(before[k]!, after);
    cpuMain[k]! += cpuDelta(before[k]!, after, true);
  });
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
    const cpuMain = hops.map(() => 0);
    let wall = 0;
    // Interleaved, each round in a rotated order, so drift on a shared machine hits all paths
    // alike.
    for (let r = 0; r < reps; r++) {
      const one = await runRound(r, c, { paths, hops, modelId }, { got, cpu, cpuMain });
      wall += one.wall;
      ratios.push(one.ratio);
      deltas.push(one.delta);
    }
    passes.push({
      ratio: summarize(ratios.slice(from)).median,
      delta: summarize(deltas.slice(from)).median,
      cpu,
      cpuMain,
      wall,
      requests: reps * c,
    });
  }
  return { c, got, ratios, deltas, passes };
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
