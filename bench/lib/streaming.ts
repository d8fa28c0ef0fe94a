// What the chat benchmarks share: one streaming request through the gateway's own lean client, a
// batch of them, pinning the engine to its own core, and the CPU time of a process group from /proc.
import { execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { locateEngine } from "@ic/engine";
import { postUpstream } from "@ic/gateway";
import { procStats, TICK_MS } from "./proc.ts";
import { isStandIn } from "./stand-in.ts";

export const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 64);

const PROMPT = [{ role: "user", content: "Tell me a story about a cluster." }];

const CONTENT = '"content":"';

export interface One {
  ttftMs: number;
  tokens: number;
}

/**
 * Whether an SSE event carries generated text (a non-empty `delta.content`), found by a string search
 * rather than JSON.parse: parsing every chunk cost the client 3-5 ms of CPU per request on the core it
 * shares with the node, which slowed the gateway path only. Warm-up checks it against JSON.parse.
 */
export function hasContent(ev: string): boolean {
  const k = ev.indexOf(CONTENT);
  return k >= 0 && ev.charCodeAt(k + CONTENT.length) !== 0x22;
}

/**
 * Splits the complete SSE events off `buf` and hands each `data:` one but `[DONE]` to `onData`
 * (`data: ` included; the gateway's `id: N` line, its engine offset for resumable streams, dropped).
 * Returns the rest: the start of an event still to come.
 */
export function takeDataEvents(buf: string, onData: (ev: string) => void): string {
  let i;
  while ((i = buf.indexOf("\n\n")) >= 0) {
    const ev = buf.slice(0, i).replace(/^id: \d+\n/, "");
    buf = buf.slice(i + 2);
    if (ev.startsWith("data: ") && ev !== "data: [DONE]") onData(ev);
  }
  return buf;
}

/**
 * One streaming request through the gateway's own lean node:http client (keep-alive pool, one retry
 * when a pooled connection was closed while idle), the same for every path, so its own cost does not
 * crowd the node off the shared core; TTFT = first SSE chunk with generated content.
 */
export async function streamOnce(
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
  const res = await postUpstream(`${base}/v1/chat/completions`, body, { headers });
  let ttft = -1;
  let tokens = 0;
  let buf = "";
  const onData = (ev: string) => {
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
  };
  res.setEncoding("utf8");
  for await (const chunk of res) buf = takeDataEvents(buf + (chunk as string), onData);
  if (res.statusCode !== 200) throw new Error(`${base}: ${res.statusCode} ${buf}`);
  return { ttftMs: ttft, tokens };
}

/**
 * On a machine with taskset and at least two cores, the engine gets the last core to itself and the
 * node, nats-server and this client share the others, in both paths alike: otherwise the scheduler
 * moves the engine's compute thread around and the noise swamps the gateway's own cost. Returns a
 * line for the report.
 */
export async function pinCores(env: Record<string, string>): Promise<string> {
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
  // The wrapper lives as long as the benchmark's process (its nodes start engines through it).
  process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
  const wrapper = join(dir, "llama-server");
  writeFileSync(wrapper, `#!/bin/sh\nexec taskset -c ${last} '${bin}' "$@"\n`);
  chmodSync(wrapper, 0o755);
  env.SERVICE_ENGINE_SERVER_BIN = wrapper;
  return `engine pinned to core ${last}; node, nats-server and client on core${cores === 2 ? "" : "s"} ${rest}`;
}

/** The processes of group `pgid` (or just `pid`) other than the engine, with their stat fields. */
function* hopStats(
  sel: { pgid: number } | { pid: number },
): Generator<{ pid: number; name: string; fields: string[] }> {
  for (const p of procStats()) {
    const match = "pgid" in sel ? Number(p.fields[2]) === sel.pgid : p.pid === sel.pid;
    if (match && !p.name.startsWith("llama-server") && !isStandIn(p.pid)) yield p;
  }
}

/**
 * CPU time (user + system, ms) of the processes in process group `pgid` (or the one process `pid`),
 * the engine excluded: what the hop itself costs, whatever the scheduler does with it.
 */
export function cpuMs(sel: { pgid: number } | { pid: number }): { ms: number; names: string[] } {
  let ticks = 0;
  const names: string[] = [];
  for (const p of hopStats(sel)) {
    ticks += Number(p.fields[11]) + Number(p.fields[12]);
    names.push(p.name);
  }
  return { ms: ticks * TICK_MS, names };
}

/**
 * Processes of group `pgid` (or just `pid`) other than llama-server, with their names: the hop whose
 * CPU time threadCpu reads.
 */
export function hopProcesses(
  sel: { pgid: number } | { pid: number },
): { pid: number; name: string }[] {
  return [...hopStats(sel)].map(({ pid, name }) => ({ pid, name }));
}

/**
 * Time on a CPU (ms, nanosecond resolution) of every thread of each process, from
 * /proc/<pid>/task/<tid>/schedstat: exact over short intervals, where /proc/<pid>/stat counts in
 * 10 ms clock ticks. Keyed by thread, so a thread that comes or goes between two readings is left out
 * of their difference (see cpuDelta).
 */
export function threadCpu(pids: readonly number[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const pid of pids) {
    let tids: string[];
    try {
      tids = readdirSync(`/proc/${pid}/task`);
    } catch {
      continue;
    }
    for (const tid of tids) {
      try {
        const ns = Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]);
        out.set(`${pid}/${tid}`, ns / 1e6);
      } catch {
        // the thread ended
      }
    }
  }
  return out;
}

/**
 * CPU ms between two threadCpu readings, over the threads present in both; `mainOnly`: only each
 * process's main thread (its event loop, for a Node process), not its GC and I/O helpers.
 */
export function cpuDelta(
  before: Map<string, number>,
  after: Map<string, number>,
  mainOnly = false,
): number {
  let ms = 0;
  for (const [k, v] of after) {
    if (mainOnly && !isMainThread(k)) continue;
    const b = before.get(k);
    if (b !== undefined) ms += v - b;
  }
  return ms;
}

/** A threadCpu key (`pid/tid`) of a process's main thread (its tid is its pid). */
function isMainThread(key: string): boolean {
  const slash = key.indexOf("/");
  return key.slice(0, slash) === key.slice(slash + 1);
}

export async function batch(
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
