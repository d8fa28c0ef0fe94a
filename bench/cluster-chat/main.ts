// The cluster's chat capacity (issue 32): n nodes on lab hosts (network namespaces, TLS, tokens, as
// deployed), each running the stand-in engine (bench/lib/stand-in-engine.mjs: answers at once, so
// only our path is measured) with the tiny model placed once per node. Closed-loop clients spread
// over every gateway, at rising concurrency; before each step the same load goes straight to the
// engines (the baseline). Per step: requests/s, p50/p99 and p99 added over the baseline, the master's
// CPU, CPU per request of the nodes, their nats-servers, the engines and the client, events, bus
// messages and bytes per request, event-log records and bytes per request per node. Reports the
// highest rate with p99 added under 20 ms and no failure. BENCH_PROFILE=<dir>: CPU profiles of the
// master and one other gateway over the whole run, summarized in the report.
// Usage: npm run bench cluster-chat. Settings (env): BENCH_SIZES (3,10), BENCH_LEVELS (requests at
// once per gateway: 1,2,4,8,16), BENCH_WINDOW_S (8), BENCH_IDLE_S (4), BENCH_MAX_TOKENS (4),
// BENCH_WARMUP_S (5), BENCH_REPORT (write the section elsewhere), BENCH_SECTION (its title).
import { mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { machineLine, writeSection } from "../lib/report.ts";
import { summarize } from "../lib/profile-summary.ts";
import { closedLoop } from "./load.ts";
import { startBench } from "./cluster.ts";
import type { Bench } from "./cluster.ts";
import { figures, MAX_TOKENS, measureIdle, measureStep, WINDOW_S } from "./measure.ts";
import type { Figures } from "./measure.ts";
import { reportOf } from "./report.ts";
import type { SizeRun } from "./report.ts";

const SIZES = (process.env.BENCH_SIZES ?? "3,10").split(",").map(Number);
const LEVELS = (process.env.BENCH_LEVELS ?? "1,2,4,8,16").split(",").map(Number);
const WARMUP_S = Number(process.env.BENCH_WARMUP_S ?? 5);

async function warmUp(b: Bench): Promise<void> {
  const r = await closedLoop({
    targets: b.gateways,
    perTarget: 4,
    seconds: WARMUP_S,
    model: b.modelId,
    maxTokens: MAX_TOKENS,
    ca: b.ca,
  });
  if (r.ok === 0) throw new Error(`warm-up: every request failed: ${r.failures.join("; ")}`);
}

function largest(dir: string): string {
  return readdirSync(dir)
    .filter((f) => f.endsWith(".cpuprofile"))
    .map((f) => join(dir, f))
    .sort((a, b) => statSync(b).size - statSync(a).size)[0]!;
}

async function runSize(n: number): Promise<SizeRun> {
  const profileDir = process.env.BENCH_PROFILE
    ? mkdtempSync(join(process.env.BENCH_PROFILE, `n${n}-`))
    : undefined;
  const b = await startBench(n, profileDir);
  const rows: Figures[] = [];
  let idleCores = 0;
  try {
    await warmUp(b);
    const idle = await measureIdle(b);
    idleCores = idle.machineCores;
    for (const level of LEVELS) {
      const f = figures(b, await measureStep(b, level, idle));
      rows.push(f);
      console.log(
        `n=${n} c=${f.total}: ${f.rate.toFixed(0)} req/s (direct ${f.directRate.toFixed(0)}), p99 ${f.p99.toFixed(1)} ms (+${f.addedP99.toFixed(1)}), master ${(f.masterCore * 100).toFixed(0)}% of a core, node CPU ${f.nodeCpuPerReq.toFixed(2)} ms/req, ${f.failed} failed`,
      );
      if (f.failures.length) console.log(`  failures: ${f.failures.join(" | ")}`);
    }
  } finally {
    // The nodes exit normally on SIGTERM, which writes their profiles.
    await b.cluster[Symbol.asyncDispose]();
    rmSync(b.dir, { recursive: true, force: true });
  }
  // Per node, its busiest thread's profile (the main thread; tsx's loader thread also writes one).
  const files = profileDir
    ? readdirSync(profileDir)
        .sort()
        .map((d) => largest(join(profileDir, d)))
    : [];
  return {
    n,
    idleCores,
    rows,
    profile: files.length ? files.map((f) => summarize(f, 20)).join("\n\n") : undefined,
  };
}

async function main(): Promise<void> {
  const runs: SizeRun[] = [];
  for (const n of SIZES) runs.push(await runSize(n));
  const context = `${machineLine()}; ${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), load average ${loadavg()[0]!.toFixed(2)} at the end. ${WINDOW_S} s per step, non-streaming requests of max_tokens ${MAX_TOKENS}.`;
  const text = reportOf(runs, context);
  console.log(text);
  await writeSection(
    process.env.BENCH_SECTION ?? "Cluster chat capacity (bench/cluster-chat)",
    text,
  );
}

await main();
