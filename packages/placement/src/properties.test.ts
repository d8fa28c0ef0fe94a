// Property tests over random clusters: accepted placements never overfill a node and split layers
// exactly; the search is complete on small clusters (brute force agrees) and independent of input order.
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { estimateNodeRequirement, resolveMemoryModel, splitLayers } from "./memory.ts";
import type { MemoryModel, ModelFacts } from "./memory.ts";
import { place } from "./place.ts";
import type { CandidateNode, PlacementInput, Sharding } from "./place.ts";
import type { LinkEdge } from "./topology.ts";

const G = 1e9;

/** Random small clusters, biased towards placeable ones so that accepted rings of 3+ nodes are common. */
const arbCase = fc.integer({ min: 1, max: 6 }).chain((n) =>
  fc.record({
    free: fc.array(fc.integer({ min: 0, max: 200 }), { minLength: n, maxLength: n }),
    pairs: fc.array(fc.tuple(fc.nat(n - 1), fc.nat(n - 1), fc.integer({ min: 1, max: 20 })), {
      maxLength: 24,
    }),
    k: fc.integer({ min: 1, max: n }),
    layers: fc.integer({ min: 1, max: 80 }),
    weightGb: fc.integer({ min: 1, max: 200 }),
    heads: fc.constantFrom(0, 12, 12, 4, 32),
    supportsTensor: fc.constantFrom(true, true, true, false),
    sharding: fc.constantFrom<Sharding>("Pipeline", "Tensor"),
    excluded: fc.oneof(
      fc.constant<number[]>([]),
      fc.subarray(
        Array.from({ length: n }, (_, i) => i),
        { maxLength: Math.min(2, n) },
      ),
    ),
    bare: fc.boolean(),
  }),
);
/** Rings of 3+ nodes on near-complete meshes: mostly placeable, so ring invariants get exercised. */
const arbRing = fc.integer({ min: 3, max: 7 }).chain((n) =>
  fc.record({
    free: fc.array(fc.integer({ min: 5, max: 200 }), { minLength: n, maxLength: n }),
    pairs: fc
      .array(fc.boolean(), { minLength: (n * (n - 1)) / 2, maxLength: (n * (n - 1)) / 2 })
      .map((keep) => {
        const out: [number, number, number][] = [];
        let i = 0;
        for (let a = 0; a < n; a++)
          for (let b = a + 1; b < n; b++)
            if (keep[i++] || (a + b) % 3 === 0) out.push([a, b, 1 + ((a * 7 + b) % 5)]);
        return out;
      }),
    k: fc.integer({ min: 3, max: n }),
    layers: fc.integer({ min: 7, max: 80 }),
    weightGb: fc.integer({ min: 1, max: 150 }),
    heads: fc.constant(0),
    supportsTensor: fc.constant(true),
    sharding: fc.constantFrom<Sharding>("Pipeline", "Tensor"),
    excluded: fc.constant<number[]>([]),
    bare: fc.boolean(),
  }),
);

type Case = typeof arbCase extends fc.Arbitrary<infer T> ? T : never;

function build(c: Case): PlacementInput {
  const nodes: CandidateNode[] = c.free.map((f, i) => ({
    node_id: `n${i}`,
    name: `gpu-${i}`,
    free_bytes: f * G,
  }));
  const links: LinkEdge[] = c.pairs.map(([a, b, rtt]) => ({ a: `n${a}`, b: `n${b}`, rtt_ms: rtt }));
  const model: ModelFacts = {
    model_id: "org/m",
    weight_bytes: c.weightGb * G,
    layers: c.layers,
    context_length: 8192,
    embedding_length: 4096,
    head_count: c.heads,
    head_count_kv: c.heads,
    supports_tensor: c.supportsTensor,
  };
  return {
    nodes,
    links,
    model,
    minNodes: c.k,
    sharding: c.sharding,
    excluded: c.excluded.map((i) => `n${i}`),
    memory: c.bare ? { overheadFactor: 1, runnerBytes: 0, kvBytesPerElement: 0 } : {},
  };
}

const linked = (links: readonly LinkEdge[], x: string, y: string) =>
  links.some((l) => (l.a === x && l.b === y) || (l.a === y && l.b === x));

/** Every k-subset of candidates that can be arranged as a ring, and whether any of them fits. */
function brute(input: PlacementInput): { ringExists: boolean; fitExists: boolean } {
  const mem: MemoryModel = resolveMemoryModel(input.memory);
  const excluded = new Set(input.excluded);
  const cands = input.nodes
    .filter((n) => !excluded.has(n.node_id))
    .map((n) => ({ id: n.node_id, free: n.free_bytes! }))
    .sort((a, b) => b.free - a.free || (a.id < b.id ? -1 : 1));
  const k = input.minNodes;
  let ringExists = false;
  let fitExists = false;
  const isRing = (set: typeof cands): boolean => {
    if (set.length === 1) return true;
    if (set.length === 2) return linked(input.links, set[0]!.id, set[1]!.id);
    const rest = set.slice(1);
    const perm = (path: typeof cands, left: typeof cands): boolean => {
      if (left.length === 0) return linked(input.links, path[path.length - 1]!.id, path[0]!.id);
      return left.some(
        (v, i) =>
          linked(input.links, path[path.length - 1]!.id, v.id) &&
          perm([...path, v], [...left.slice(0, i), ...left.slice(i + 1)]),
      );
    };
    return perm([set[0]!], rest);
  };
  const fitsSet = (set: typeof cands): boolean => {
    const fractions =
      input.sharding === "Tensor" || k === 1
        ? set.map(() => 1 / k)
        : splitLayers(
            input.model.layers,
            set.map((n) => n.free),
          )!.map((l) => l / input.model.layers);
    return set.every(
      (n, i) => estimateNodeRequirement(input.model, fractions[i]!, mem).required_bytes < n.free,
    );
  };
  const choose = (start: number, set: typeof cands): void => {
    if (set.length === k) {
      if (isRing(set)) {
        ringExists = true;
        if (fitsSet(set)) fitExists = true;
      }
      return;
    }
    for (let i = start; i < cands.length; i++) choose(i + 1, [...set, cands[i]!]);
  };
  choose(0, []);
  return { ringExists, fitExists };
}

describe("placement properties", () => {
  it.each([
    ["random small clusters", arbCase],
    ["rings of 3+ nodes on near-complete meshes", arbRing],
  ])("no accepted placement overfills a node, and layers sum to the model's: %s", (_name, arb) => {
    fc.assert(
      fc.property(arb, (c) => {
        const input = build(c);
        const r = place(input);
        if (!r.ok) return;
        const ids = r.shares.map((s) => s.node_id);
        expect(ids).toHaveLength(c.k);
        expect(new Set(ids).size).toBe(c.k);
        for (const id of ids) expect(input.excluded).not.toContain(id);
        const mem = resolveMemoryModel(input.memory);
        for (const s of r.shares) {
          expect(s.required_bytes).toBeLessThan(s.free_bytes);
          expect(s.required_bytes).toBe(
            estimateNodeRequirement(input.model, s.fraction, mem).required_bytes,
          );
        }
        expect(r.shares.reduce((t, s) => t + s.fraction, 0)).toBeCloseTo(1, 9);
        if (c.sharding === "Pipeline") {
          expect(r.shares.reduce((t, s) => t + s.layers!, 0)).toBe(c.layers);
          for (const s of r.shares) expect(s.layers).toBeGreaterThanOrEqual(1);
        }
        // A ring in the link graph, rank 0 the node with most free memory.
        for (let i = 0; i < ids.length && ids.length > 1; i++) {
          const next = ids[(i + 1) % ids.length]!;
          if (ids.length === 2 && i === 1) break;
          expect(linked(input.links, ids[i]!, next)).toBe(true);
        }
        expect(r.shares[0]!.free_bytes).toBe(Math.max(...r.shares.map((s) => s.free_bytes)));
      }),
      { numRuns: 1000 },
    );
  });

  it.each([
    ["random small clusters", arbCase],
    ["rings of 3+ nodes on near-complete meshes", arbRing],
  ])(
    "is complete: it accepts exactly when some ring fits, else names the right blocker: %s",
    (_name, arb) => {
      fc.assert(
        fc.property(arb, (c) => {
          const input = build(c);
          const r = place(input);
          const candidates = c.free.length - c.excluded.length;
          const tensorOk = c.supportsTensor && (c.k === 1 || c.heads === 0 || c.heads % c.k === 0);
          const pre = (c.sharding === "Tensor" ? tensorOk : c.layers >= c.k) && candidates >= c.k;
          if (!pre) {
            expect(r.ok).toBe(false);
            return;
          }
          const truth = brute(input);
          expect(r.ok).toBe(truth.fitExists);
          if (!r.ok) expect(r.code).toBe(truth.ringExists ? "insufficient_memory" : "no_cycle");
        }),
        { numRuns: 1000 },
      );
    },
  );

  it("does not depend on the order of nodes, links or exclusions", () => {
    fc.assert(
      fc.property(arbCase, fc.integer(), (c, seed) => {
        const input = build(c);
        let s = seed >>> 0;
        const shuffle = <T>(xs: readonly T[]): T[] => {
          const out = [...xs];
          for (let i = out.length - 1; i > 0; i--) {
            s = (s * 1664525 + 1013904223) >>> 0;
            const j = s % (i + 1);
            [out[i], out[j]] = [out[j]!, out[i]!];
          }
          return out;
        };
        const again = place({
          ...input,
          nodes: shuffle(input.nodes),
          links: shuffle(input.links).map((l) =>
            s & 1 ? { a: l.b, b: l.a, rtt_ms: l.rtt_ms } : l,
          ),
          excluded: shuffle(input.excluded ?? []),
        });
        expect(again).toEqual(place(input));
      }),
      { numRuns: 300 },
    );
  });
});
