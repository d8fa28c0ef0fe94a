// The cache follows the conversation (issue 50): what moving a stream's KV cache on a drain saves
// against a re-prefill migration, at 2k, 8k and 32k tokens of context. 3 hosts in network
// namespaces (TLS, tokens), the wide tiny model (30 MB F16, ~3 KB of KV cache per token) on the
// holder only (off node-1), one llama-server slot each. Each run streams one answer through node-1
// with a prompt of the given length, drains the holder after 5 tokens, and reads the rest: the
// master places the model on the third node and, once it is ready, node-1's gateway hands the
// stream over. With the cache (the default), the holder saves the slot and the other restores it;
// the baseline, in the same run of the bench, is a second cluster whose nodes refuse every slot file
// (`engine.kv_move_max_bytes: 1`), so the same hand-over re-prefills the whole prompt. Measured at
// the client: the pause between the last token from the holder and the first continued token, and
// the time from the drain to that token; from the continuation's final event, what the target
// computed (`timings.prompt_n`, `prompt_ms`); from node-1's log, the save, fetch and restore times.
// BENCH_RUNS (default 2) runs per length and mode; BENCH_CONTEXTS (default 2048,8192,32768).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { placeAndWait, seedStore, startHostCluster, waitForConvergence } from "@ic/testkit";
import type { HostCluster, NodeProcess } from "@ic/testkit";
import { machineLine, writeSection } from "../lib/report.ts";
import { takeDataEvents } from "../lib/streaming.ts";

const RUNS = Number(process.env.BENCH_RUNS ?? 2);
const CONTEXTS = (process.env.BENCH_CONTEXTS ?? "2048,8192,32768").split(",").map(Number);
const MAX_TOKENS = 600;
/** A slot holds the longest prompt and its answer. */
const SLOT_CONTEXT = Math.max(...CONTEXTS) + MAX_TOKENS + 512;

type Mode = "cache" | "re-prefill";

interface Run {
  readonly mode: Mode;
  readonly context: number;
  /** The pause the client saw: last token from the holder → first continued token. */
  readonly pauseMs: number;
  /** The drain request → the first continued token (includes the replacement's start). */
  readonly drainToTokenMs: number;
  /** The continuation on the target: prompt tokens computed and reused, and the time computing. */
  readonly prefilled: number;
  readonly reused: number;
  readonly prefillMs: number;
  /** The moved slot file (cache mode). */
  readonly bytes?: number;
  readonly saveMs?: number;
  readonly fetchMs?: number;
  readonly restoreMs?: number;
}

interface StateDoc {
  node_identities: { node_id: string; name: string }[];
  instances: { instance_id: string; assignments: { node_id: string }[] }[];
}
interface Chunk {
  choices?: { delta?: { content?: string | null } }[];
  timings?: { cache_n: number; prompt_n: number; prompt_ms: number };
  x_ic?: { migrated_from?: string; kv?: { restored_tokens: number; bytes: number } };
  error?: unknown;
}

const words = "river stone lantern orchard harbor meadow signal copper window garden".split(" ");
/** About `tokens` tokens of text (the tiny model's vocabulary is bytes). */
function promptOf(tokens: number, seed: number): string {
  let s = `Run ${seed}. `;
  for (let i = 0; s.length < tokens - 40; i++) s += `${words[(i * 7 + seed) % words.length]} `;
  return s;
}

/** The node of `cluster` that holds the model's instance now. */
async function holderOf(cluster: HostCluster, n1: NodeProcess): Promise<NodeProcess> {
  const s = await n1.get<StateDoc>("/state");
  const nodeId = s.instances[0]!.assignments[0]!.node_id;
  const name = s.node_identities.find((n) => n.node_id === nodeId)!.name;
  return cluster.node(name);
}

/** One stream, drained mid-way: the client's view of the hand-over and the engine's counts. */
async function oneRun(
  cluster: HostCluster,
  model: string,
  o: { mode: Mode; context: number; seed: number },
): Promise<Run> {
  const n1 = cluster.node("node-1");
  const holder = await holderOf(cluster, n1);
  const res = await fetch(`${n1.apiUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-ic-migrate": "1", ...n1.authHeaders },
    body: JSON.stringify({
      model,
      messages: [{ role: "user", content: promptOf(o.context, o.seed) }],
      max_tokens: MAX_TOKENS,
      ignore_eos: true,
      temperature: 0,
      stream: true,
    }),
  });
  if (res.status !== 200) throw new Error(`chat ${res.status}: ${await res.text()}`);
  const events: { at: number; chunk: Chunk }[] = [];
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let carry = "";
  let drainAt = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    carry += decoder.decode(value, { stream: true });
    const at = performance.now();
    carry = takeDataEvents(carry, (ev) =>
      events.push({ at, chunk: JSON.parse(ev.slice("data: ".length)) as Chunk }),
    );
    const texts = events.filter((e) => e.chunk.choices?.[0]?.delta?.content).length;
    if (!drainAt && texts >= 5) {
      drainAt = performance.now();
      void holder.post("/admin/drain", {});
    }
  }
  if (events.some((e) => e.chunk.error)) throw new Error("the stream ended with an error event");
  const last = events.findLast((e) => e.chunk.x_ic?.migrated_from)?.chunk;
  if (!last) throw new Error("the stream was not handed over");
  // The first continued token: the one after the longest pause since the drain.
  let pause = 0;
  let resumedAt = 0;
  for (let i = 1; i < events.length; i++) {
    const e = events[i]!;
    if (e.at < drainAt) continue;
    const gap = e.at - events[i - 1]!.at;
    if (gap > pause) [pause, resumedAt] = [gap, e.at];
  }
  const t = events.findLast((e) => e.chunk.timings)!.chunk.timings!;
  const moved = n1.logLines.findLast((l) => l.includes("a stream's KV cache moved with it"));
  const num = (k: string) =>
    moved ? Number(new RegExp(`"${k}":([\\d.]+)`).exec(moved)?.[1]) : NaN;
  const run: Run = {
    mode: o.mode,
    context: o.context,
    pauseMs: pause,
    drainToTokenMs: resumedAt - drainAt,
    prefilled: t.prompt_n,
    reused: t.cache_n,
    prefillMs: t.prompt_ms,
    ...(last.x_ic?.kv
      ? {
          bytes: last.x_ic.kv.bytes,
          saveMs: num("save_ms"),
          fetchMs: num("fetch_ms"),
          restoreMs: num("restore_ms"),
        }
      : {}),
  };
  if (o.mode === "cache" && run.bytes === undefined)
    throw new Error(
      `the cache did not move: ${n1.logLines.filter((l) => l.includes("KV cache")).at(-1)}`,
    );
  // The drained node comes back for the next run (the instance is on the other one now).
  while (holder.running) await new Promise((r) => setTimeout(r, 200));
  await holder.start();
  await waitForConvergence(cluster.nodes, 3);
  return run;
}

async function modeRuns(store: string, model: string, mode: Mode): Promise<Run[]> {
  const cluster = await startHostCluster(3, {
    config: (i) => ({
      ...(i === 0 ? { store_path: store } : {}),
      node: { drain_timeout_ms: 300_000 },
      chat: { total_timeout_ms: 1_800_000, kv_move_timeout_ms: 60_000 },
      engine: {
        context_size: SLOT_CONTEXT,
        extra_args: ["-np", "1", "-t", "1"],
        ...(mode === "re-prefill" ? { kv_move_max_bytes: 1 } : {}),
      },
    }),
  });
  const runs: Run[] = [];
  try {
    await waitForConvergence(cluster.nodes, 3);
    const n1 = cluster.node("node-1");
    const doc = await n1.get<StateDoc>("/state");
    const node1 = doc.node_identities.find((n) => n.name === "node-1")!.node_id;
    await placeAndWait(n1, { model_id: model, excluded_nodes: [node1] }, 120_000);
    for (const context of CONTEXTS)
      for (let r = 0; r < RUNS; r++) {
        const run = await oneRun(cluster, model, { mode, context, seed: r });
        runs.push(run);
        console.log(JSON.stringify(run));
      }
  } finally {
    await cluster[Symbol.asyncDispose]();
  }
  return runs;
}

async function main(): Promise<void> {
  const store = await mkdtemp(join(tmpdir(), "ic-bench-kv-move-"));
  const { modelId } = await seedStore(store, {
    modelId: "bench/kv-wide",
    slow: true,
    contextLength: 65536,
  });
  try {
    const cache = await modeRuns(store, modelId, "cache");
    const baseline = await modeRuns(store, modelId, "re-prefill");
    await report([...cache, ...baseline]);
  } finally {
    await rm(store, { recursive: true, force: true });
  }
}

const median = (xs: readonly number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function report(runs: readonly Run[]): Promise<void> {
  const rows: string[] = [];
  for (const context of CONTEXTS) {
    const of = (m: Mode) => runs.filter((r) => r.context === context && r.mode === m);
    const c = of("cache");
    const b = of("re-prefill");
    const m = (rs: readonly Run[], f: (r: Run) => number) => median(rs.map(f));
    const span = (rs: readonly Run[], f: (r: Run) => number) => {
      const xs = rs.map(f).sort((x, y) => x - y);
      return `${xs[0]!.toFixed(0)}–${xs.at(-1)!.toFixed(0)}`;
    };
    const mb = m(c, (r) => r.bytes ?? 0) / 1e6;
    const fetchMs = m(c, (r) => r.fetchMs ?? 0);
    rows.push(
      `| ${context} | ${m(c, (r) => r.pauseMs).toFixed(0)} (${span(c, (r) => r.pauseMs)}) | ${m(b, (r) => r.pauseMs).toFixed(0)} (${span(b, (r) => r.pauseMs)}) | **${(m(c, (r) => r.pauseMs) / m(b, (r) => r.pauseMs)).toFixed(2)}** | ${m(c, (r) => r.drainToTokenMs).toFixed(0)} / ${m(b, (r) => r.drainToTokenMs).toFixed(0)} | ${m(c, (r) => r.prefilled).toFixed(0)} of ${m(c, (r) => r.prefilled + r.reused).toFixed(0)} / ${m(b, (r) => r.prefilled).toFixed(0)} | ${(m(b, (r) => r.prefillMs) - m(c, (r) => r.prefillMs)).toFixed(0)} | ${mb.toFixed(1)} | ${m(c, (r) => r.saveMs ?? 0).toFixed(1)} / ${fetchMs.toFixed(1)} / ${m(c, (r) => r.restoreMs ?? 0).toFixed(1)} | ${(mb / (fetchMs / 1000)).toFixed(0)} |`,
    );
  }
  const body = `${machineLine()}; \`npm run bench kv-move\` (bench/kv-move/main.ts), ${RUNS} runs per context length and mode.

3 hosts in network namespaces (TLS between them, bearer tokens); the wide tiny model (30 MB F16,
6 layers, 2 KV heads of 64: 3,072 bytes of KV cache per token) on one node off node-1, one
llama-server slot of ${SLOT_CONTEXT} tokens on one thread per node. Each run streams one answer
(max_tokens ${MAX_TOKENS}, greedy) through node-1 with a prompt of about the given length, drains
the holder (\`POST /admin/drain\`) after 5 tokens, and reads the rest: the master starts the model on
the third node and, once it is ready, node-1's gateway hands the stream over. **With the cache**
(the default) the holder saves the slot and the third node restores it; **re-prefill** is the
baseline, the same bench on a second cluster whose nodes take no slot file
(\`engine.kv_move_max_bytes: 1\`), so the same hand-over computes the whole prompt again.

| context (tokens) | pause, with the cache: ms (range) | pause, re-prefill: ms (range) | cache ÷ re-prefill | drain → first continued token, ms (cache / re-prefill) | prompt tokens the target computed (cache: of all / re-prefill) | prefill ms avoided | slot file MB | save / fetch / restore ms | fetch MB/s |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
${rows.join("\n")}

The pause is what the client sees: the time between the last token from the draining node and the
first continued token, measured at the client (medians). It holds the hand-over itself (stopping the
stream, the bus requests) and, with the cache, saving, fetching, checking and restoring the slot
file; with re-prefill, computing the prompt again. "Drain → first continued token" adds the
replacement's start, the same in both modes. "Prefill ms avoided" is the target's own
\`timings.prompt_ms\` of the re-prefill continuation less that of the continuation with the cache.

Where moving beats computing: the file grows linearly with the context (the model's KV bytes per
token: here 3 KB; a Llama-3-8B in F16 holds 128 KB per token, 4 GB at 32k), and so does the
transfer; prefill grows at least linearly (attention makes it worse with length). The fetch here
runs over veth between namespaces on one machine, far faster than a real network: on a link of
R MB/s a move costs about size ÷ R plus the save and restore, against the prefill time in the
table, on the operator's own GPU.
`;
  console.log(body);
  await writeSection(
    "The cache follows the conversation: moving a stream's KV cache on a drain",
    body,
  );
}

await main();
