// Gateway overhead: time to first token and tokens/s through a node's /v1/chat/completions versus the
// same llama-server called directly, at concurrency 1 and 16, in one run. Writes "## Gateway".
import { execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { Agent, request } from "node:http";
import type { IncomingMessage } from "node:http";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { locateEngine } from "@ic/engine";
import { placeAndWait, seedStore, startCluster, waitForConvergence } from "@ic/testkit";
import { machineLine, summarize, writeSection } from "../lib/report.ts";

const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 64);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 6);
/** Requests per path before measuring: the node's JavaScript runs optimized only after many calls. */
const WARMUP = Number(process.env.BENCH_WARMUP ?? 200);

interface One {
  ttftMs: number;
  tokens: number;
}

const agent = new Agent({ keepAlive: true, maxSockets: 64 });
const PROMPT = [{ role: "user", content: "Tell me a story about a cluster." }];

function postOnce(base: string, body: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const u = new URL(`${base}/v1/chat/completions`);
    const req = request(
      {
        agent,
        host: u.hostname,
        port: u.port,
        path: u.pathname,
        method: "POST",
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) },
      },
      resolve,
    );
    req.on("error", (e) => reject(Object.assign(e, { reusedSocket: req.reusedSocket })));
    req.end(body);
  });
}

/**
 * One streaming request through a lean node:http client (the same client for both paths, so its own
 * cost does not crowd the node off the shared core); TTFT = first SSE chunk with generated content.
 */
async function streamOnce(base: string, model: string): Promise<One> {
  const body = JSON.stringify({
    model,
    messages: PROMPT,
    max_tokens: MAX_TOKENS,
    stream: true,
    temperature: 0,
  });
  const t0 = performance.now();
  const res = await postOnce(base, body).catch((e: { reusedSocket?: boolean }) => {
    // llama-server closes idle keep-alive connections; a request that lost that race is retried once.
    if (e.reusedSocket) return postOnce(base, body);
    throw e;
  });
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
      const j = JSON.parse(ev.slice(6)) as { choices?: { delta?: { content?: string } }[] };
      if (j.choices?.[0]?.delta?.content) {
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

async function batch(
  base: string,
  model: string,
  concurrency: number,
): Promise<{ ttft: number[]; tokensPerSec: number }> {
  const t0 = performance.now();
  const results = await Promise.all(
    Array.from({ length: concurrency }, () => streamOnce(base, model)),
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
    const gateway = node.apiUrl;
    console.log(
      `direct llama-server ${direct}, gateway ${gateway}, max_tokens ${MAX_TOKENS}, ${ROUNDS} rounds, ${pinning}`,
    );
    // Warm up both paths.
    for (let i = 0; i < WARMUP; i++) {
      await streamOnce(direct, modelId);
      await streamOnce(gateway, modelId);
    }
    const rows: string[] = [];
    const results: { addedMs: number; throughput: number }[] = [];
    for (const c of [1, 16]) {
      const d = { ttft: [] as number[], tps: [] as number[] };
      const g = { ttft: [] as number[], tps: [] as number[] };
      const reps = c === 1 ? ROUNDS * 5 : ROUNDS;
      // Interleave so drift on a shared machine hits both paths alike.
      for (let r = 0; r < reps; r++) {
        const first = r % 2 === 0 ? "direct" : "gateway";
        for (const which of [first, first === "direct" ? "gateway" : "direct"]) {
          const res = await batch(which === "direct" ? direct : gateway, modelId, c);
          const into = which === "direct" ? d : g;
          into.ttft.push(...res.ttft);
          into.tps.push(res.tokensPerSec);
        }
      }
      const dt = summarize(d.ttft);
      const gt = summarize(g.ttft);
      const dtps = summarize(d.tps).median;
      const gtps = summarize(g.tps).median;
      const line = `| ${wide ? "wide (30 MB)" : "tiny (0.8 MB)"} | ${c} | ${dt.median.toFixed(2)} | ${gt.median.toFixed(2)} | ${(gt.median - dt.median).toFixed(2)} | ${(gt.median / dt.median).toFixed(3)} | ${dtps.toFixed(0)} | ${gtps.toFixed(0)} | ${((gtps / dtps) * 100).toFixed(1)}% |`;
      console.log(line);
      rows.push(line);
      results.push({ addedMs: gt.median - dt.median, throughput: gtps / dtps });
    }
    const met = results.every((x) => x.addedMs < 2 && x.throughput > 0.97);
    const verdict = met ? "met in this run" : "**not met in this run** (see the table)";
    await writeSection(
      wide ? "Gateway (wide model)" : "Gateway (tiny model)",
      `\`${wide ? "BENCH_MODEL=wide " : ""}npm run bench gateway\` — ${machineLine()}.

Streaming chat completions (max_tokens ${MAX_TOKENS}, temperature 0) against one llama-server (CPU
build, \`-t 1 -tb 1\`; ${pinning};
${wide ? "the wide test model: 384 wide, 6 layers, F16" : "the 0.8 MB tiny test model: thousands of tokens/s, the worst case for per-chunk overhead"}), called directly and through a node's \`/v1/chat/completions\` (task
creation through the master, SSE pass-through with id rewriting), interleaved in the same run, after
${WARMUP} warm-up requests per path; the client is a keep-alive node:http client.
TTFT = first SSE chunk with generated content, median over all requests; tokens/s = generated
tokens of a batch / its wall time, median over batches. Targets: under 2 ms added TTFT, over 97% of
direct throughput — ${verdict}.

| model | concurrency | TTFT direct (ms) | TTFT gateway (ms) | added (ms) | gateway/direct | tok/s direct | tok/s gateway | gateway throughput |
|---|---|---|---|---|---|---|---|---|
${rows.join("\n")}
`,
    );
    console.log("wrote its Gateway section of docs/benchmarks.md");
  } finally {
    await cluster.stop();
    rmSync(store, { recursive: true, force: true });
  }
}

await main();
