// bench/gateway's report: the per-path and target rows from every concurrency's passes, the verdict
// against the targets, and its section of docs/benchmarks.md (or BENCH_REPORT).
import { machineLine, summarize, writeSection } from "../lib/report.ts";
import { MAX_TOKENS } from "../lib/streaming.ts";
import {
  ENGINE_ARGS,
  FLOOR,
  GATEWAY,
  NATS,
  PASSES,
  ROUNDS_1,
  ROUNDS_16,
  STAND_IN_MODE,
  STAND_IN_TPS,
  TARGETS,
  WARMUP,
  pct,
} from "./settings.ts";
import type { AtConcurrency, Pass, Path } from "./settings.ts";

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
  const main = [0, 1].map((k) => pct(summarize(at.passes.map((p) => mainShare(p, k))).median));
  const ttft = got.map((g) => summarize(g.ttft).median);
  const tps = got.map((g) => summarize(g.tps).median);
  const cpuCell = (k: number) =>
    k === FLOOR
      ? `${cpuMed[0]!.toFixed(2)} (main thread ${main[0]})`
      : k === GATEWAY
        ? `${cpuMed[1]!.toFixed(2)} (nats-server ${cpuMed[2]!.toFixed(2)}; main threads ${main[1]})`
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

/** The share of hop `k`'s CPU over a pass on its processes' main threads (idle not taken off). */
function mainShare(p: Pass, k: number): number {
  return p.cpu[k]! > 0 ? p.cpuMain[k]! / p.cpu[k]! : 0;
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
export function analyze(
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
        `c=${c} pass ${i + 1}: gateway/floor ${pct(p.ratio)}, TTFT gateway - floor ${p.delta.toFixed(2)} ms; hop CPU per request: floor ${perRequest[i]![0]!.toFixed(2)} ms, gateway ${perRequest[i]![1]!.toFixed(2)} ms (nats-server ${perRequest[i]![NATS]!.toFixed(2)}); on main threads: floor ${pct(mainShare(p, 0))}, gateway ${pct(mainShare(p, 1))}`,
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
export async function writeReport(r: {
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
its nats-server (${counted}; the engine excluded; the nats-server's share in brackets). "Main
thread(s)": the share of the hop's CPU on its processes' main threads (the event loops; the rest is
V8's garbage-collection helpers and libuv's threads), idle included, median over the passes.

| model | concurrency | path | TTFT (ms) | added vs direct (ms) | tok/s | throughput vs direct | hop CPU per request (ms) |
|---|---|---|---|---|---|---|---|
${rows.join("\n")}
`,
  );
}
