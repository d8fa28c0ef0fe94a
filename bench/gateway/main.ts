// Gateway overhead: time to first token and tokens/s through a node's /v1/chat/completions versus the
// same llama-server called directly, at concurrency 1 and 16, in one run; a bare Node pass-through
// proxy on the node's core is measured alongside as the floor of any Node hop on this machine.
// Writes "## Gateway (tiny model)" or "## Gateway (wide model)".
import { execFileSync, spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import { locateEngine } from "@ic/engine";
import { postUpstream } from "@ic/gateway";
import { clusterCredentials } from "@ic/config";
import { placeAndWait, seedStore, startCluster, waitForConvergence } from "@ic/testkit";
import { machineLine, summarize, writeSection } from "../lib/report.ts";

const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 64);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 6);
/** Requests per path before measuring: the node's JavaScript runs optimized only after many calls. */
const WARMUP = Number(process.env.BENCH_WARMUP ?? 200);
/** Requests per hop whose CPU time is read as one block (a multiple of 16). */
const CPU_REQUESTS = Number(process.env.BENCH_CPU_REQUESTS ?? 160);

interface One {
  ttftMs: number;
  tokens: number;
}

const PROMPT = [{ role: "user", content: "Tell me a story about a cluster." }];
/** The client never aborts; postUpstream wants a signal. */
const NEVER = new AbortController().signal;

const CONTENT = '"content":"';

/**
 * Whether an SSE event carries generated text (a non-empty `delta.content`), found by a string search
 * rather than JSON.parse: parsing every chunk cost the client 3-5 ms of CPU per request on the core it
 * shares with the node, which slowed the gateway path only. Warm-up checks it against JSON.parse.
 */
function hasContent(ev: string): boolean {
  const k = ev.indexOf(CONTENT);
  return k >= 0 && ev.charCodeAt(k + CONTENT.length) !== 0x22;
}

/**
 * One streaming request through the gateway's own lean node:http client (keep-alive pool, one retry
 * when a pooled connection was closed while idle), the same for every path, so its own cost does not
 * crowd the node off the shared core; TTFT = first SSE chunk with generated content.
 */
async function streamOnce(
  base: string,
  model: string,
  headers: Record<string, string>,
  verify = false,
): Promise<One> {
  const body = JSON.stringify({
    model,
    messages: PROMPT,
    max_tokens: MAX_TOKENS,
    stream: true,
    temperature: 0,
  });
  const t0 = performance.now();
  const res = await postUpstream(`${base}/v1/chat/completions`, body, { signal: NEVER, headers });
  let ttft = -1;
  let tokens = 0;
  let buf = "";
  res.setEncoding("utf8");
  for await (const chunk of res) {
    buf += chunk as string;
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      const has = hasContent(ev);
      if (verify) {
        const j = JSON.parse(ev.slice(6)) as { choices?: { delta?: { content?: string } }[] };
        if (Boolean(j.choices?.[0]?.delta?.content) !== has)
          throw new Error(`content detection disagrees with JSON.parse on: ${ev}`);
      }
      if (has) {
        if (ttft < 0) ttft = performance.now() - t0;
        tokens++;
      }
    }
  }
  if (res.statusCode !== 200) throw new Error(`${base}: ${res.statusCode} ${buf}`);
  return { ttftMs: ttft, tokens };
}

/**
 * On a machine with taskset and at least two cores, the engine gets the last core to itself and the
 * node, nats-server and this client share the others, in both paths alike: otherwise the scheduler
 * moves the engine's compute thread around and the noise swamps the gateway's own cost. Returns a
 * line for the report.
 */
async function pinCores(env: Record<string, string>): Promise<string> {
  const cores = availableParallelism();
  try {
    execFileSync("taskset", ["-V"], { stdio: "ignore" });
  } catch {
    return "not pinned (no taskset)";
  }
  if (cores < 2) return "not pinned (one core)";
  const engine = await locateEngine({ serverBinOverride: process.env.SERVICE_ENGINE_SERVER_BIN });
  const bin = engine.server_bin;
  if (!bin) return "not pinned (no engine build found)";
  const last = cores - 1;
  const rest = cores === 2 ? "0" : `0-${last - 1}`;
  execFileSync("taskset", ["-a", "-p", "-c", rest, String(process.pid)], { stdio: "ignore" });
  const dir = mkdtempSync(join(tmpdir(), "bench-pin-"));
  const wrapper = join(dir, "llama-server");
  writeFileSync(wrapper, `#!/bin/sh\nexec taskset -c ${last} '${bin}' "$@"\n`);
  chmodSync(wrapper, 0o755);
  env.SERVICE_ENGINE_SERVER_BIN = wrapper;
  return `engine pinned to core ${last}; node, nats-server and client on core${cores === 2 ? "" : "s"} ${rest}`;
}

const TICK_MS = 1000 / Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim() || 100);

/**
 * CPU time (user + system, ms) of the processes in process group `pgid` (or the one process `pid`),
 * the engine excluded: what the hop itself costs, whatever the scheduler does with it.
 */
function cpuMs(sel: { pgid: number } | { pid: number }): { ms: number; names: string[] } {
  let ticks = 0;
  const names: string[] = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${d}/stat`, "utf8");
    } catch {
      continue;
    }
    const close = stat.lastIndexOf(")");
    const comm = stat.slice(stat.indexOf("(") + 1, close);
    const f = stat.slice(close + 2).split(" ");
    // f[0] is field 3 (state): pgrp is field 5, utime 14, stime 15.
    const match = "pgid" in sel ? Number(f[2]) === sel.pgid : Number(d) === sel.pid;
    if (!match || comm.startsWith("llama-server")) continue;
    ticks += Number(f[11]) + Number(f[12]);
    names.push(comm);
  }
  return { ms: ticks * TICK_MS, names };
}

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

async function batch(
  base: string,
  model: string,
  headers: Record<string, string>,
  concurrency: number,
): Promise<{ ttft: number[]; tokensPerSec: number }> {
  const t0 = performance.now();
  const results = await Promise.all(
    Array.from({ length: concurrency }, () => streamOnce(base, model, headers)),
  );
  const wall = (performance.now() - t0) / 1000;
  return {
    ttft: results.map((r) => r.ttftMs),
    tokensPerSec: results.reduce((s, r) => s + r.tokens, 0) / wall,
  };
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
