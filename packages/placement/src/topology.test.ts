// Tests of the link graph, biconnected blocks and the bounded cycle search, against brute force on
// small graphs (the search must be complete when its budget allows) and on large rings (it must stay fast).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  biconnectedBlocks,
  buildGraph,
  cycleRtt,
  improveRing,
  isCycle,
  largestBlock,
  rotateExtend,
  searchCycles,
} from "./topology.ts";
import type { LinkEdge, LinkGraph } from "./topology.ts";
import { DEFAULT_SEARCH_BUDGET } from "./place.ts";

const ids = (n: number) => Array.from({ length: n }, (_, i) => `n${i}`);
const edges = (pairs: readonly (readonly [number, number])[], rtt = 1): LinkEdge[] =>
  pairs.map(([a, b]) => ({ a: `n${a}`, b: `n${b}`, rtt_ms: rtt }));
const graph = (n: number, pairs: readonly (readonly [number, number])[]) =>
  buildGraph(ids(n), edges(pairs));

function first(g: LinkGraph, k: number, budget = 1e9) {
  let got: number[] | null = null;
  const out = searchCycles(g, {
    k,
    limit: g.n,
    budget: { left: budget },
    visit: (c) => {
      got = [...c];
      return true;
    },
  });
  return { cycle: got as number[] | null, ...out };
}

/** Brute force: does any simple cycle of exactly k nodes exist? */
function bruteHasCycle(n: number, pairs: readonly (readonly [number, number])[], k: number) {
  const adj = Array.from({ length: n }, () => new Set<number>());
  for (const [a, b] of pairs) {
    if (a === b) continue;
    adj[a]!.add(b);
    adj[b]!.add(a);
  }
  if (k === 1) return n >= 1;
  if (k === 2) return adj.some((s) => s.size > 0);
  const on = new Array<boolean>(n).fill(false);
  const walk = (s: number, last: number, len: number): boolean => {
    if (len === k) return adj[last]!.has(s);
    for (const v of adj[last]!) {
      if (v <= s || on[v]) continue;
      on[v] = true;
      if (walk(s, v, len + 1)) return true;
      on[v] = false;
    }
    return false;
  };
  for (let s = 0; s < n; s++) {
    on.fill(false);
    on[s] = true;
    if (walk(s, s, 1)) return true;
  }
  return false;
}

/** A ring over all nodes plus two random chords per node, as a sparse cluster fabric. */
function ringWithChords(n: number, seed: number): LinkEdge[] {
  let a = seed;
  const rand = () => (a = (a * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
  const out: LinkEdge[] = [];
  for (let i = 0; i < n; i++) out.push({ a: `n${i}`, b: `n${(i + 1) % n}`, rtt_ms: 1 });
  for (let i = 0; i < n; i++)
    for (let c = 0; c < 2; c++)
      out.push({ a: `n${i}`, b: `n${Math.floor(rand() * n)}`, rtt_ms: 2 });
  return out;
}

describe("buildGraph", () => {
  it("drops self links and unknown ids, and keeps the fastest of duplicate links", () => {
    const g = buildGraph(
      ["a", "b", "c"],
      [
        { a: "a", b: "b", rtt_ms: 5 },
        { a: "b", b: "a", rtt_ms: 2 },
        { a: "a", b: "a", rtt_ms: 1 },
        { a: "a", b: "ghost", rtt_ms: 1 },
        { a: "b", b: "c", rtt_ms: 3 },
      ],
    );
    expect(g.rtt(0, 1)).toBe(2);
    expect(g.rtt(1, 0)).toBe(2);
    expect(g.rtt(0, 0)).toBeUndefined();
    expect(g.rtt(0, 2)).toBeUndefined();
    expect([...g.adj[1]!]).toEqual([0, 2]);
  });

  it("measures a ring's latency: nothing for one node, the link for two, the loop for more", () => {
    const g = buildGraph(
      ["a", "b", "c"],
      [
        { a: "a", b: "b", rtt_ms: 1 },
        { a: "b", b: "c", rtt_ms: 2 },
        { a: "c", b: "a", rtt_ms: 4 },
      ],
    );
    expect(cycleRtt(g, [0])).toBe(0);
    expect(cycleRtt(g, [0, 1])).toBe(1);
    expect(cycleRtt(g, [0, 1, 2])).toBe(7);
  });
});

const smallGraph = fc.integer({ min: 1, max: 8 }).chain((n) =>
  fc.record({
    n: fc.constant(n),
    pairs: fc.array(fc.tuple(fc.nat(n - 1), fc.nat(n - 1)), { maxLength: 20 }),
  }),
);

describe("biconnectedBlocks", () => {
  it.each([
    ["an isolated node is a block of one", 1, [], [[0]]],
    ["a bridge is a block of two", 2, [[0, 1]], [[0, 1]]],
    [
      "a triangle with a pendant",
      4,
      [
        [0, 1],
        [1, 2],
        [2, 0],
        [2, 3],
      ],
      [
        [0, 1, 2],
        [2, 3],
      ],
    ],
    [
      "two triangles sharing a node",
      5,
      [
        [0, 1],
        [1, 2],
        [2, 0],
        [2, 3],
        [3, 4],
        [4, 2],
      ],
      [
        [0, 1, 2],
        [2, 3, 4],
      ],
    ],
    [
      "a square is one block",
      4,
      [
        [0, 1],
        [1, 2],
        [2, 3],
        [3, 0],
      ],
      [[0, 1, 2, 3]],
    ],
  ] as const)("%s", (_name, n, pairs, want) => {
    const got = biconnectedBlocks(graph(n, pairs)).sort(
      (x, y) => x[0]! - y[0]! || x.length - y.length,
    );
    expect(got).toEqual(want);
  });

  it("counts only the nodes below the limit", () => {
    const g = graph(4, [
      [0, 1],
      [1, 2],
      [2, 3],
      [3, 0],
    ]);
    expect(largestBlock(g, 4)).toBe(4);
    expect(largestBlock(g, 3)).toBe(2);
  });

  it("never rules out a cycle that exists: a k-cycle implies a block of at least k", () => {
    fc.assert(
      fc.property(smallGraph, ({ n, pairs }) => {
        const g = graph(n, pairs);
        for (let k = 3; k <= n; k++)
          if (bruteHasCycle(n, pairs, k)) expect(largestBlock(g)).toBeGreaterThanOrEqual(k);
      }),
      { numRuns: 300 },
    );
  });
});

describe("searchCycles", () => {
  it.each([
    ["one node is a cycle of 1", 1, [], 1, true],
    ["two linked nodes are a cycle of 2", 2, [[0, 1]], 2, true],
    ["two unlinked nodes are not", 2, [], 2, false],
    [
      "a triangle",
      3,
      [
        [0, 1],
        [1, 2],
        [2, 0],
      ],
      3,
      true,
    ],
    [
      "a path is not a cycle",
      3,
      [
        [0, 1],
        [1, 2],
      ],
      3,
      false,
    ],
    [
      "a square has no triangle",
      4,
      [
        [0, 1],
        [1, 2],
        [2, 3],
        [3, 0],
      ],
      3,
      false,
    ],
    [
      "a square is a 4-cycle",
      4,
      [
        [0, 1],
        [1, 2],
        [2, 3],
        [3, 0],
      ],
      4,
      true,
    ],
    [
      "two triangles joined by a bridge have no 4-cycle",
      6,
      [
        [0, 1],
        [1, 2],
        [2, 0],
        [2, 3],
        [3, 4],
        [4, 5],
        [5, 3],
      ],
      4,
      false,
    ],
  ] as const)("%s", (_name, n, pairs, k, exists) => {
    const r = first(graph(n, pairs), k);
    expect(r.cycle !== null).toBe(exists);
    expect(r.exhausted).toBe(false);
    if (r.cycle) expect(isCycle(graph(n, pairs), r.cycle)).toBe(true);
  });

  it("is complete on small graphs: it finds a k-cycle exactly when one exists", () => {
    fc.assert(
      fc.property(smallGraph, fc.integer({ min: 1, max: 8 }), ({ n, pairs }, k) => {
        const g = graph(n, pairs);
        const r = first(g, k);
        expect(r.exhausted).toBe(false);
        expect(r.cycle !== null).toBe(k <= n && bruteHasCycle(n, pairs, k));
        if (r.cycle) {
          expect(r.cycle).toHaveLength(k);
          expect(isCycle(g, r.cycle)).toBe(true);
          expect(r.cycle[0]).toBe(Math.min(...r.cycle));
        }
      }),
      { numRuns: 500 },
    );
  });

  it("finds each cycle once, from its best-ranked node", () => {
    // K4 has 4 triangles and 3 four-cycles.
    const g = graph(4, [
      [0, 1],
      [0, 2],
      [0, 3],
      [1, 2],
      [1, 3],
      [2, 3],
    ]);
    const all = (k: number) => {
      const seen: string[] = [];
      searchCycles(g, {
        k,
        limit: 4,
        budget: { left: 1e6 },
        visit: (c) => (seen.push(c.join()), false),
      });
      return seen;
    };
    expect(all(3)).toEqual(["0,1,2", "0,1,3", "0,2,3", "1,2,3"]);
    expect(all(4)).toEqual(["0,1,2,3", "0,1,3,2", "0,2,1,3"]);
  });

  it("stays within its budget and says so when it runs out", () => {
    const n = 256;
    const g = buildGraph(ids(n), ringWithChords(n, 7));
    const budget = { left: 500 };
    const r = searchCycles(g, { k: 200, limit: n, budget, visit: () => true });
    expect(r.found).toBe(0);
    expect(r.exhausted).toBe(true);
    expect(budget.left).toBeLessThanOrEqual(0);
    expect(budget.left).toBeGreaterThan(-2_000);
  });

  it("prunes with the caller's cut: no path whose weight can no longer reach the bar", () => {
    const g = graph(4, [
      [0, 1],
      [0, 2],
      [0, 3],
      [1, 2],
      [1, 3],
      [2, 3],
    ]);
    const w = [10, 5, 5, 1];
    const seen: number[][] = [];
    searchCycles(g, {
      k: 3,
      limit: 4,
      budget: { left: 1e6 },
      weight: (v) => w[v]!,
      cut: (sum, missing, s) => sum + (missing > 0 ? w[s + 1]! * missing : 0) <= 16,
      visit: (c) => (seen.push([...c]), false),
    });
    expect(seen).toEqual([[0, 1, 2]]);
  });

  it("finds long rings on a sparse 256-node fabric within the default budget, deterministically", () => {
    const n = 256;
    const g = buildGraph(ids(n), ringWithChords(n, 11));
    for (const k of [3, 8, 64, 128, 250, 256]) {
      const a = first(g, k, DEFAULT_SEARCH_BUDGET);
      expect(a.cycle, `k=${k}`).not.toBeNull();
      expect(isCycle(g, a.cycle!)).toBe(true);
      expect(first(g, k, DEFAULT_SEARCH_BUDGET).cycle).toEqual(a.cycle);
    }
  });
});

describe("rotateExtend", () => {
  it("finds a Hamiltonian ring where one exists and respects the allowed set", () => {
    const n = 64;
    const g = buildGraph(ids(n), ringWithChords(n, 3));
    const ring = rotateExtend(g, { k: n, limit: n, budget: { left: 1e6 } });
    expect(ring).not.toBeNull();
    expect(isCycle(g, ring!)).toBe(true);
    const within = new Uint8Array(n).fill(1);
    within[5] = 0;
    const partial = rotateExtend(g, { k: 20, limit: n, within, budget: { left: 1e6 } });
    expect(partial).not.toBeNull();
    expect(partial).not.toContain(5);
    expect(isCycle(g, partial!)).toBe(true);
  });

  it("gives up within its budget when no ring exists", () => {
    const g = graph(6, [
      [0, 1],
      [1, 2],
      [2, 3],
      [3, 4],
      [4, 5],
    ]);
    const budget = { left: 10_000 };
    expect(rotateExtend(g, { k: 4, limit: 6, budget })).toBeNull();
  });
});

describe("improveRing", () => {
  it("uncrosses a ring to lower its summed latency and keeps rank 0 first", () => {
    // A square 0-1-2-3 with fast sides and slow diagonals, given in crossed order 0-2-1-3.
    const g = buildGraph(ids(4), [
      ...edges(
        [
          [0, 1],
          [1, 2],
          [2, 3],
          [3, 0],
        ],
        1,
      ),
      ...edges(
        [
          [0, 2],
          [1, 3],
        ],
        10,
      ),
    ]);
    expect(cycleRtt(g, [0, 2, 1, 3])).toBe(22);
    const better = improveRing(g, [0, 2, 1, 3]);
    expect(better[0]).toBe(0);
    expect(cycleRtt(g, better)).toBe(4);
    expect(isCycle(g, better)).toBe(true);
  });

  it("never uses a pair that is not linked", () => {
    const g = buildGraph(
      ids(4),
      edges(
        [
          [0, 1],
          [1, 2],
          [2, 3],
          [3, 0],
        ],
        1,
      ),
    );
    expect(improveRing(g, [0, 1, 2, 3])).toEqual([0, 1, 2, 3]);
  });
});
