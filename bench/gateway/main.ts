// Gateway overhead: time to first token and tokens/s through a node's /v1/chat/completions versus the
// same llama-server called directly, at concurrency 1 and 16, in one run; a bare Node pass-through
// proxy on the node's core is measured alongside as the floor of any Node hop on this machine.
// Writes "## Gateway (tiny model)" or "## Gateway (wide model)".
import { spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import { clusterCredentials } from "@ic/config";
import { placeAndWait, seedStore, startCluster, waitForConvergence } from "@ic/testkit";
import { machineLine, summarize, writeSection } from "../lib/report.ts";
import { batch, cpuMs, MAX_TOKENS, pinCores, streamOnce } from "../lib/streaming.ts";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 6);
/** Requests per path before measuring: the node's JavaScript runs optimized only after many calls. */
const WARMUP = Number(process.env.BENCH_WARMUP ?? 200);
/** Requests per hop whose CPU time is read as one block (a multiple of 16). */
const CPU_REQUESTS = Number(process.env.BENCH_CPU_REQUESTS ?? 160);

/** CPU ms per wall ms of each hop while no request runs (heartbeats, telemetry, timers), over 3 s. */
async function idleCpuRates(cpu: ReadonlyArray<() => number>): Promise<number[]> {
  const before = cpu.map((f) => f());
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, 3000));
  const wall = performance.now() - t0;
  return cpu.map((f, k) => (f() - before[k]!) / wall);
}

/** Starts floor-proxy.mjs in front of `upstream`; resolves with its URL and the process. */
async function startFloorProxy(upstream: string): Promise<{ url: string; proc: ChildProcess }> {
  const script = join(dirname(fileURLToPath(import.meta.url)), "floor-proxy.mjs");
  const proc = spawn(process.execPath, [script, upstream], {
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

async function main(): Promise<void> {
  const store = mkdtempSync(join(tmpdir(), "bench-gw-"));
  const wide = process.env.BENCH_MODEL === "wide";
  const { modelId } = await seedStore(store, { slow: wide });
  const env: Record<string, string> = {};
  const pinning = await pinCores(env);
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
        extra_args: (process.env.BENCH_ENGINE_ARGS ?? "-t 1 -tb 1").split(" ").filter(Boolean),
      },
      logging: { level: "warn" },
    }),
  });
  let floor: { url: string; proc: ChildProcess } | undefined;
  try {
    const node = cluster.nodes[0]!;
    await waitForConvergence(cluster.nodes, 1);
    const inst = await placeAndWait(node, { model_id: modelId, min_nodes: 1 });
    const s = await node.get<{
      instances: { instance_id: string; runners: { rank: number; endpoint?: string }[] }[];
    }>("/state");
    const direct = s.instances
      .find((i) => i.instance_id === inst.instance_id)!
      .runners.find((r) => r.rank === 0)!.endpoint!;
    floor = await startFloorProxy(direct);
    const floorPid = floor.proc.pid!;
    const nodePgid = node.pid!;
    // The engine takes only its API key (derived from the cluster secret); the gateway adds it itself.
    const engineAuth = {
      authorization: `Bearer ${clusterCredentials(node.spec.secret!).engineKey(inst.instance_id)}`,
    };
    const paths = [
      { name: "direct llama-server", url: direct, headers: engineAuth, cpu: () => 0 },
      {
        name: "bare Node proxy (floor)",
        url: floor.url,
        headers: engineAuth,
        cpu: () => cpuMs({ pid: floorPid }).ms,
      },
      // The node's process group: the node and its nats-server (the engine is excluded).
      {
        name: "gateway",
        url: node.apiUrl,
        headers: node.authHeaders,
        cpu: () => cpuMs({ pgid: nodePgid }).ms,
      },
    ];
    const names = cpuMs({ pgid: nodePgid }).names;
    // Names with their counts, e.g. "2 × node, nats-server".
    const counted = [...new Set(names)]
      .map((n) => {
        const k = names.filter((x) => x === n).length;
        return k > 1 ? `${k} × ${n}` : n;
      })
      .join(", ");
    const idleRate = await idleCpuRates(paths.map((p) => p.cpu));
    console.log(
      `${paths.map((p) => `${p.name} ${p.url}`).join(", ")}; max_tokens ${MAX_TOKENS}, ${ROUNDS * 5} rounds at concurrency 1 and ${ROUNDS * 2} at 16, ${pinning}`,
    );
    for (let i = 0; i < WARMUP; i++) {
      for (const p of paths) {
        const one = await streamOnce(p.url, modelId, p.headers, i < 10);
        if (one.tokens === 0)
          throw new Error(`a warm-up stream through ${p.name} generated no content`);
      }
    }
    const rows: string[] = [];
    const results: { addedMs: number; throughput: number }[] = [];
    const label = wide ? "wide (30 MB)" : "tiny (0.8 MB)";
    for (const c of [1, 16]) {
      const got = paths.map(() => ({ ttft: [] as number[], tps: [] as number[] }));
      const reps = c === 1 ? ROUNDS * 5 : ROUNDS * 2;
      // Interleaved, each round in a rotated order, so drift on a shared machine hits all paths alike.
      for (let r = 0; r < reps; r++) {
        for (let k = 0; k < paths.length; k++) {
          const at = (r + k) % paths.length;
          const res = await batch(paths[at]!.url, modelId, paths[at]!.headers, c);
          got[at]!.ttft.push(...res.ttft);
          got[at]!.tps.push(res.tokensPerSec);
        }
      }
      // CPU: a block of requests per hop after the timed rounds (clock ticks are 10 ms, so a block
      // of CPU_REQUESTS keeps the reading to about 0.1 ms per request).
      const cpuPerRequest: number[] = [];
      for (const [k, p] of paths.entries()) {
        const before = p.cpu();
        const t0 = performance.now();
        for (let n = 0; n < CPU_REQUESTS; n += c) await batch(p.url, modelId, p.headers, c);
        // Finished streams still owe their task bookkeeping; let it land inside the block.
        await new Promise((r) => setTimeout(r, 50));
        cpuPerRequest[k] =
          (p.cpu() - before - idleRate[k]! * (performance.now() - t0)) / CPU_REQUESTS;
      }
      const ttft = got.map((g) => summarize(g.ttft).median);
      const tps = got.map((g) => summarize(g.tps).median);
      paths.forEach((p, k) => {
        const cpu = cpuPerRequest[k]!.toFixed(2);
        const line =
          k === 0
            ? `| ${label} | ${c} | ${p.name} | ${ttft[0]!.toFixed(2)} | | ${tps[0]!.toFixed(0)} | | |`
            : `| ${label} | ${c} | ${p.name} | ${ttft[k]!.toFixed(2)} | ${(ttft[k]! - ttft[0]!).toFixed(2)} | ${tps[k]!.toFixed(0)} | ${((tps[k]! / tps[0]!) * 100).toFixed(1)}% | ${cpu} |`;
        console.log(line);
        rows.push(line);
      });
      results.push({ addedMs: ttft[2]! - ttft[0]!, throughput: tps[2]! / tps[0]! });
    }
    const met = results.every((x) => x.addedMs < 2 && x.throughput > 0.97);
    const verdict = met ? "met in this run" : "**not met in this run** (see the table)";
    await writeSection(
      wide ? "Gateway (wide model)" : "Gateway (tiny model)",
      `\`${wide ? "BENCH_MODEL=wide " : ""}npm run bench gateway\` — ${machineLine()}.

Streaming chat completions (max_tokens ${MAX_TOKENS}, temperature 0) against one llama-server (CPU
build, \`-t 1 -tb 1\`; ${pinning};
${wide ? "the wide test model: 384 wide, 6 layers, F16" : "the 0.8 MB tiny test model: thousands of tokens/s, the worst case for per-chunk overhead"}), called directly and through a node's
\`/v1/chat/completions\` (task creation through the master, SSE pass-through with id rewriting),
interleaved in rotated order (${ROUNDS * 5} rounds at concurrency 1, ${ROUNDS * 2} at 16) after ${WARMUP} warm-up
requests per path. The bare Node proxy (\`bench/gateway/floor-proxy.mjs\`: node:http pass-through,
no validation, task or bus, its own process on the node's core) is the floor of any Node hop here.
The client is a keep-alive node:http client that finds content chunks by string search (checked
against JSON.parse during warm-up), to keep its own CPU off the shared core.

TTFT = first SSE chunk with generated content, median over all requests; tokens/s = generated
tokens of a batch / its wall time, median over batches. Hop CPU per request = CPU time (user +
system, from /proc) of the hop's processes over a block of ${CPU_REQUESTS} requests after the timed
rounds, less their idle rate (over 3 s without requests: node ${(idleRate[2]! * 1000).toFixed(0)} ms/s, proxy
${(idleRate[1]! * 1000).toFixed(0)} ms/s), per request; for the gateway the node and its nats-server
(${counted}; the engine excluded); 10 ms clock ticks, so ±0.1 ms. Targets: under 2 ms added
TTFT, over 97% of direct throughput — ${verdict}.

| model | concurrency | path | TTFT (ms) | added vs direct (ms) | tok/s | throughput vs direct | hop CPU per request (ms) |
|---|---|---|---|---|---|---|---|
${rows.join("\n")}
`,
    );
    console.log("wrote its Gateway section of docs/benchmarks.md");
  } finally {
    floor?.proc.kill();
    await cluster.stop();
    rmSync(store, { recursive: true, force: true });
  }
}

await main();
