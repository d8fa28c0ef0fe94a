// Tests of previews(): every sharding x node count with its placement or typed reason, honouring
// exclusions, and always the same answer place() gives for that combination.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { ModelFacts } from "./memory.ts";
import { place, previews } from "./place.ts";
import type { CandidateNode, PreviewEntry } from "./place.ts";
import type { LinkEdge } from "./topology.ts";

const G = 1e9;
const model = (over: Partial<ModelFacts> = {}): ModelFacts => ({
  model_id: "org/m",
  weight_bytes: 10 * G,
  layers: 10,
  context_length: 4096,
  embedding_length: 4096,
  head_count: 32,
  head_count_kv: 8,
  supports_tensor: true,
  ...over,
});
const node = (id: string, freeGb: number | null): CandidateNode => ({
  node_id: id,
  name: `gpu-${id}`,
  free_bytes: freeGb === null ? null : freeGb * G,
});
const mesh = (ids: string[]): LinkEdge[] =>
  ids.flatMap((a, i) => ids.slice(i + 1).map((b) => ({ a, b, rtt_ms: 1 })));
const BARE = { overheadFactor: 1, runnerBytes: 0, kvBytesPerElement: 0 };
const summary = (p: readonly PreviewEntry[]) =>
  p.map(
    (e) =>
      `${e.sharding}/${e.nodes}:${e.result.ok ? e.result.shares.map((s) => s.node_id).join("") : e.result.code}`,
  );

describe("previews", () => {
  it("lists Pipeline then Tensor for 1..N nodes, each with its placement or reason", () => {
    const p = previews({
      nodes: [node("a", 9), node("b", 6), node("c", 6)],
      links: mesh(["a", "b", "c"]),
      model: model({ head_count: 4 }),
      memory: BARE,
    });
    expect(summary(p)).toEqual([
      "Pipeline/1:insufficient_memory",
      "Pipeline/2:ab",
      "Pipeline/3:abc",
      "Tensor/1:insufficient_memory",
      "Tensor/2:ab",
      "Tensor/3:tensor_unsupported",
    ]);
    const ok = p[1]!.result;
    if (!ok.ok) throw new Error("expected a placement");
    // Per-node memory use comes with every placement.
    expect(ok.shares.map((s) => [s.layers, s.required_bytes, s.free_bytes])).toEqual([
      [6, 6 * G, 9 * G],
      [4, 4 * G, 6 * G],
    ]);
  });

  it("honours exclusions: excluded nodes never appear and larger rings report all_excluded", () => {
    const p = previews({
      nodes: [node("a", 50), node("b", 8), node("c", 40)],
      links: mesh(["a", "b", "c"]),
      model: model({ weight_bytes: 5 * G, head_count: 0 }),
      memory: BARE,
      excluded: ["a", "stale-id"],
    });
    expect(summary(p)).toEqual([
      "Pipeline/1:c",
      "Pipeline/2:cb",
      "Pipeline/3:all_excluded",
      "Tensor/1:c",
      "Tensor/2:cb",
      "Tensor/3:all_excluded",
    ]);
  });

  it("reports info_pending for every combination of a freshly formed cluster", () => {
    const p = previews({ nodes: [node("a", null), node("b", null)], links: [], model: model() });
    expect(p.map((e) => (e.result.ok ? "ok" : e.result.code))).toEqual(
      Array(4).fill("info_pending"),
    );
    expect(previews({ nodes: [], links: [], model: model() }).map((e) => e.nodes)).toEqual([1, 1]);
  });

  it("gives for every combination exactly what place() gives", () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 60 }), { minLength: 1, maxLength: 6 }),
        fc.array(fc.tuple(fc.nat(5), fc.nat(5)), { maxLength: 15 }),
        fc.integer({ min: 1, max: 40 }),
        fc.subarray([0, 1, 2, 3, 4, 5]),
        (free, pairs, layers, excludedIx) => {
          const nodes = free.map((f, i) => node(`n${i}`, f));
          const links = pairs.map(([a, b]) => ({ a: `n${a}`, b: `n${b}`, rtt_ms: 1 + a + b }));
          const base = {
            nodes,
            links,
            model: model({ layers, weight_bytes: 30 * G, head_count: 12 }),
            excluded: excludedIx.map((i) => `n${i}`),
          };
          for (const e of previews(base)) {
            expect(e.result).toEqual(place({ ...base, minNodes: e.nodes, sharding: e.sharding }));
          }
        },
      ),
      { numRuns: 150 },
    );
  });
});
