// Placement previews latency for 4, 16, 64 and 256 simulated nodes with a random link graph, against a
// same-run baseline (sorting and scanning the node list once). Writes "## Placement previews".
import { performance } from "node:perf_hooks";
import { place, previews } from "@ic/placement";
import type { CandidateNode, LinkEdge, ModelFacts } from "@ic/placement";
import { machineLine, summarize, writeSection } from "../lib/report.ts";

function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function cluster(n: number, seed: number): { nodes: CandidateNode[]; links: LinkEdge[] } {
  const r = rng(seed);
  const nodes = Array.from({ length: n }, (_, i) => ({
    node_id: `n${i}`,
    name: `gpu-${i}`,
    free_bytes: Math.round((8 + r() * 88) * 1e9),
  }));
  const links: LinkEdge[] = [];
  // A ring (so cycles exist) plus random chords: about 4 links per node, like racks with a few uplinks.
  for (let i = 0; i < n; i++) links.push({ a: `n${i}`, b: `n${(i + 1) % n}`, rtt_ms: 0.2 + r() });
  for (let i = 0; i < n; i++) {
    for (let c = 0; c < 2; c++) {
      const j = Math.floor(r() * n);
      if (j !== i) links.push({ a: `n${i}`, b: `n${j}`, rtt_ms: 0.2 + r() * 3 });
    }
  }
  return { nodes, links };
}

const model: ModelFacts = {
  model_id: "bench/llama-70b-q4",
  weight_bytes: 40e9,
  layers: 80,
  context_length: 8192,
  embedding_length: 8192,
  head_count: 64,
  head_count_kv: 8,
  supports_tensor: true,
};

function time(fn: () => void, runs: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t = performance.now();
    fn();
    out.push(performance.now() - t);
  }
  return out;
}

const rows: string[] = [];
console.log("nodes  previews median  p95      baseline median  ratio");
for (const n of [4, 16, 64, 256]) {
  const c = cluster(n, n);
  const runs = n >= 256 ? 20 : n >= 64 ? 50 : 200;
  // Previews cover every sharding x node count (2n placements), as GET /instance/previews does.
  time(() => previews({ ...c, model }), 3);
  const p = summarize(time(() => previews({ ...c, model }), runs));
  const base = summarize(
    time(() => {
      const s = [...c.nodes].sort((a, b) => (b.free_bytes ?? 0) - (a.free_bytes ?? 0));
      let acc = 0;
      for (const x of s) acc += x.free_bytes ?? 0;
      if (acc < 0) throw new Error("unreachable");
    }, runs * 10),
  );
  const one = summarize(
    time(() => place({ ...c, model, minNodes: Math.min(4, n), sharding: "Pipeline" }), runs * 5),
  );
  const ratio = p.median / Math.max(base.median, 1e-6);
  console.log(
    `${String(n).padStart(5)}  ${p.median.toFixed(3).padStart(10)} ms  ${p.p95.toFixed(3).padStart(7)} ms  ${base.median.toFixed(4).padStart(10)} ms  ${ratio.toFixed(0)}x`,
  );
  rows.push(
    `| ${n} | ${one.median.toFixed(3)} | ${2 * n} | ${p.median.toFixed(3)} | ${p.p95.toFixed(3)} | ${base.median.toFixed(4)} | ${ratio.toFixed(0)}x |`,
  );
}

await writeSection(
  "Placement previews",
  `\`npx tsx bench/placement/main.ts\` — ${machineLine()}.

GET /instance/previews computes every sharding x node count (2n placements) for a 40 GB, 80-layer
model over a random link graph (a ring plus two random chords per node). Baseline: sorting and
scanning the node list once, measured in the same run.

| nodes | one placement, min_nodes 4, median (ms) | placements in previews | previews median (ms) | p95 (ms) | baseline median (ms) | previews / baseline |
|---|---|---|---|---|---|---|
${rows.join("\n")}
`,
);
console.log("wrote the Placement previews section of docs/benchmarks.md");
