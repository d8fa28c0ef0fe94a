// Prefix-cache-aware routing (issue 32, item 3): 2 nodes, the wide model (seedStore's `slow`, F16)
// with two replicas, one per node, each llama-server on one thread with 8 slots. The workload: 16
// conversations at once, each 6 turns in order, streaming, all sharing one system prompt, each with
// its own long first user message (a document to work on); every conversation sends its turns through both gateways
// in turn (requests spread over the cluster). It runs twice in the same run, each on a fresh
// cluster (empty prompt caches): chat.prefix_routing off (least outstanding requests, the
// baseline) and on. It reports TTFT (first content chunk) median and p95, by turn, throughput
// (completion tokens per second of the whole workload) and how many requests each replica served.
// Reports only. BENCH_CONVERSATIONS, BENCH_TURNS, BENCH_SYSTEM_CHARS, BENCH_DOCUMENT_CHARS change
// the workload.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  seedStore,
  startCluster,
  waitFor,
  waitForConvergence,
  waitForReadyInstances,
} from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";
import { machineLine, summarize, writeSection } from "../lib/report.ts";

const CONVERSATIONS = Number(process.env.BENCH_CONVERSATIONS ?? 16);
const TURNS = Number(process.env.BENCH_TURNS ?? 6);
const SYSTEM_CHARS = Number(process.env.BENCH_SYSTEM_CHARS ?? 400);
const DOCUMENT_CHARS = Number(process.env.BENCH_DOCUMENT_CHARS ?? 900);
const MAX_TOKENS = 32;
/** Tokens of context per slot (the model trains at 16,384, which llama-server caps -c at, over 8 slots). */
const SLOT_CTX = 2048;
const SLOTS = 8;

interface Turn {
  readonly conversation: number;
  readonly turn: number;
  readonly ttftMs: number;
  readonly totalMs: number;
  readonly tokens: number;
  readonly instance: string;
}

const words = "river stone lantern orchard harbor meadow signal copper window garden".split(" ");
/** Deterministic filler text of `n` characters (byte-level vocab: about one token per byte). */
function text(seed: number, n: number): string {
  let s = "";
  for (let i = 0; s.length < n; i++) s += `${words[(seed * 7 + i * 3) % words.length]} `;
  return s.slice(0, n);
}

const SYSTEM = `You are a planning assistant. ${text(1, SYSTEM_CHARS)}`;

async function turnOnce(
  node: NodeProcess,
  model: string,
  messages: { role: string; content: string }[],
): Promise<{ ttftMs: number; totalMs: number; content: string; tokens: number; instance: string }> {
  const start = performance.now();
  const r = await fetch(`${node.apiUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { ...node.authHeaders, "content-type": "application/json" },
    body: JSON.stringify({
      model,
      messages,
      max_tokens: MAX_TOKENS,
      stream: true,
      stream_options: { include_usage: true },
    }),
  });
  if (r.status !== 200 || !r.body) throw new Error(`chat ${r.status}: ${await r.text()}`);
  const instance = r.headers.get("x-instance-id") ?? "?";
  let ttftMs = NaN;
  let content = "";
  let tokens = 0;
  let buf = "";
  const decoder = new TextDecoder();
  for await (const chunk of r.body) {
    buf += decoder.decode(chunk as Uint8Array, { stream: true });
    let at;
    while ((at = buf.indexOf("\n\n")) >= 0) {
      // The gateway's events start with their engine offset (`id: N`, resumable streams).
      const ev = buf.slice(0, at).replace(/^id: \d+\n/, "");
      buf = buf.slice(at + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      const data = JSON.parse(ev.slice(6)) as {
        choices?: { delta?: { content?: string | null } }[];
        usage?: { completion_tokens: number };
        error?: unknown;
      };
      if (data.error) throw new Error(`stream error ${JSON.stringify(data.error)}`);
      const piece = data.choices?.[0]?.delta?.content;
      if (piece) {
        if (Number.isNaN(ttftMs)) ttftMs = performance.now() - start;
        content += piece;
      }
      if (data.usage) tokens = data.usage.completion_tokens;
    }
  }
  return { ttftMs, totalMs: performance.now() - start, content, tokens, instance };
}

async function conversation(nodes: readonly NodeProcess[], model: string, c: number) {
  const out: Turn[] = [];
  const messages = [
    { role: "system", content: SYSTEM },
    { role: "user", content: `Conversation ${c}. Summarize this: ${text(c + 11, DOCUMENT_CHARS)}` },
  ];
  for (let t = 1; t <= TURNS; t++) {
    const r = await turnOnce(nodes[(c + t) % nodes.length]!, model, messages);
    out.push({ conversation: c, turn: t, ...r });
    messages.push(
      { role: "assistant", content: r.content },
      { role: "user", content: `Next (${t}): ${text(c * 13 + t, 60)}` },
    );
  }
  return out;
}

async function run(prefixRouting: boolean) {
  const store = await mkdtemp(join(tmpdir(), "ic-bench-routing-"));
  try {
    const { modelId } = await seedStore(store, { modelId: "bench/routing-wide", slow: true });
    await using cluster = await startCluster(2, {
      config: (i) => ({
        chat: { prefix_routing: prefixRouting },
        engine: { context_size: SLOTS * SLOT_CTX, extra_args: ["-np", String(SLOTS), "-t", "1"] },
        ...(i === 0 ? { store_path: store } : {}),
      }),
    });
    const nodes = cluster.nodes;
    await waitForConvergence(nodes, 2);
    await waitFor(
      async () =>
        (await nodes[0]!.get<{ models: unknown[] }>("/state")).models.length > 0 ? true : undefined,
      { timeoutMs: 30_000, what: "the model registered" },
    );
    const placed = await nodes[0]!.post("/place_instance", { model_id: modelId, replicas: 2 });
    if (placed.status !== 200) throw new Error(`place_instance ${placed.status}`);
    await waitForReadyInstances(nodes[0]!, 2, 120_000);
    const started = performance.now();
    const turns = (
      await Promise.all(
        Array.from({ length: CONVERSATIONS }, (_, c) => conversation(nodes, modelId, c)),
      )
    ).flat();
    const wallS = (performance.now() - started) / 1000;
    return { turns, wallS };
  } finally {
    await rm(store, { recursive: true, force: true });
  }
}

function describeRun(name: string, r: { turns: Turn[]; wallS: number }) {
  const all = summarize(r.turns.map((t) => t.ttftMs));
  const later = summarize(r.turns.filter((t) => t.turn > 1).map((t) => t.ttftMs));
  const tokens = r.turns.reduce((n, t) => n + t.tokens, 0);
  const byInstance = new Map<string, number>();
  for (const t of r.turns) byInstance.set(t.instance, (byInstance.get(t.instance) ?? 0) + 1);
  const homes = new Map<number, Set<string>>();
  for (const t of r.turns)
    homes.set(t.conversation, (homes.get(t.conversation) ?? new Set()).add(t.instance));
  const kept = [...homes.values()].filter((s) => s.size === 1).length;
  const byTurn = Array.from({ length: TURNS }, (_, i) =>
    Math.round(summarize(r.turns.filter((t) => t.turn === i + 1).map((t) => t.ttftMs)).median),
  );
  return {
    name,
    median: all.median,
    p95: all.p95,
    laterMedian: later.median,
    tps: tokens / r.wallS,
    wallS: r.wallS,
    split: [...byInstance.values()].sort((a, b) => b - a),
    kept,
    byTurn,
  };
}

const lor = describeRun("least outstanding (prefix_routing off)", await run(false));
const prefix = describeRun("prefix routing (on)", await run(true));
const f = (n: number) => n.toFixed(0);
const rows = [lor, prefix].map(
  (d) =>
    `| ${d.name} | ${f(d.median)} | ${f(d.p95)} | ${f(d.laterMedian)} | ${d.byTurn.join(" / ")} | ${d.tps.toFixed(1)} | ${d.wallS.toFixed(1)} | ${d.split.join(" / ")} | ${d.kept} of ${CONVERSATIONS} |`,
);
const body = [
  `Command: \`npm run bench routing\`. ${machineLine()}. 2 nodes (loopback), the wide model (F16, 384 wide, 6 layers) with two replicas, one per node, each llama-server on one thread with ${SLOTS} slots (${SLOT_CTX} tokens each). ${CONVERSATIONS} conversations at once, ${TURNS} turns each in order, streaming, ${MAX_TOKENS} tokens per answer; one system prompt of ${SYSTEM.length} characters (byte-level vocab: about one token per byte) shared by all, a first user message of its own (a document, ~${DOCUMENT_CHARS + 40} characters), ~70 per follow-up; each conversation's turns alternate between the two gateways. Each mode on a fresh cluster in the same run.`,
  "",
  "| routing | TTFT median ms | TTFT p95 ms | TTFT median, turns 2+ | median TTFT by turn (ms) | completion tok/s | wall s | requests per replica | conversations on one replica |",
  "|---|---|---|---|---|---|---|---|---|",
  ...rows,
  "",
  `Ratios (least outstanding ÷ prefix routing): median TTFT **${(lor.median / prefix.median).toFixed(2)}×** lower, p95 ${(lor.p95 / prefix.p95).toFixed(2)}×, turns 2+ median ${(lor.laterMedian / prefix.laterMedian).toFixed(2)}×; throughput ${(prefix.tps / lor.tps).toFixed(2)}× (prefix ÷ least outstanding).`,
];
body.push(
  "",
  `Why: with prefix routing ${prefix.kept} of ${CONVERSATIONS} conversations stayed on one replica, so a turn's prompt is in that replica's slot but for its last ~100 tokens; least outstanding kept ${lor.kept}, and a turn sent to the other replica reads the conversation's document and history again (~1,000-1,500 tokens; the shared system prompt is cached on both). Turn 1 is cold in both modes (${CONVERSATIONS} prompts at once on one thread per replica) and is one sample in ${TURNS}; the warm turns' TTFT with prefix routing is mostly the queue of ${SLOTS} streams on one thread. Issue 32's target, a median TTFT at least 2x lower with throughput not lower: ${lor.median / prefix.median >= 2 ? "met" : "missed"} in this run (${(lor.median / prefix.median).toFixed(2)}x over all turns, ${(lor.laterMedian / prefix.laterMedian).toFixed(2)}x on turns 2+; throughput ${(prefix.tps / lor.tps).toFixed(2)}x).`,
);
console.log(body.join("\n"));
await writeSection("Prefix-cache-aware routing (bench/routing)", body.join("\n"));
