// Table tests of every placement rule: per-node memory with strict fit, Pipeline and Tensor shares,
// rings in the link graph, exclusions, pending info, typed refusals with their messages and statuses.
import { describe, expect, it } from "vitest";
import type { MemoryModel, ModelFacts } from "./memory.ts";
import { place } from "./place.ts";
import type { CandidateNode, Placement, PlacementInput, PlacementResult } from "./place.ts";
import { httpStatusFor, PLACEMENT_REFUSAL_CODES } from "@ic/protocol";
import type { Refusal, RefusalCode } from "./refusals.ts";
import type { LinkEdge } from "./topology.ts";

const G = 1e9;
/** No KV cache, no runner allowance, no overhead: the arithmetic in these tables is exact. */
const BARE: Partial<MemoryModel> = { overheadFactor: 1, runnerBytes: 0, kvBytesPerElement: 0 };

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
const link = (a: string, b: string, rtt_ms = 1): LinkEdge => ({ a, b, rtt_ms });
const ring = (ids: string[], rtt = 1): LinkEdge[] =>
  ids.map((a, i) => link(a, ids[(i + 1) % ids.length]!, rtt));
const mesh = (ids: string[], rtt = 1): LinkEdge[] =>
  ids.flatMap((a, i) => ids.slice(i + 1).map((b) => link(a, b, rtt)));

function input(over: Partial<PlacementInput> & Pick<PlacementInput, "nodes">): PlacementInput {
  return {
    links: mesh(over.nodes.map((n) => n.node_id)),
    model: model(),
    minNodes: 1,
    sharding: "Pipeline",
    memory: BARE,
    ...over,
  };
}
function refused(r: PlacementResult): Refusal {
  if (r.ok) throw new Error(`expected a refusal, got ${r.shares.map((s) => s.node_id).join(",")}`);
  return r;
}
function accepted(r: PlacementResult): Placement {
  if (!r.ok) throw new Error(`expected acceptance, got ${r.code}: ${r.message}`);
  return r;
}
const ids = (r: PlacementResult) => accepted(r).shares.map((s) => s.node_id);

interface RefusalCase {
  readonly name: string;
  readonly input: PlacementInput;
  readonly code: RefusalCode;
  /** Substrings the message must contain. */
  readonly says?: readonly string[];
  readonly node?: string;
}

const refusals: RefusalCase[] = [
  // Memory, per node, never summed.
  {
    name: "a share exactly equal to free memory is rejected",
    input: input({ nodes: [node("a", 10)] }),
    code: "insufficient_memory",
    node: "a",
    says: ["needs 10.00 GB", "has 10.00 GB free", "strictly less"],
  },
  {
    name: "memory is never summed: two 6 GB nodes cannot hold 10 GB on one node",
    input: input({ nodes: [node("a", 6), node("b", 6)] }),
    code: "insufficient_memory",
    node: "a",
  },
  {
    name: "Tensor on 10 GB + 100 GB is refused for the small node, which the message names",
    input: input({
      nodes: [node("small", 10), node("big", 100)],
      model: model({ weight_bytes: 30 * G }),
      minNodes: 2,
      sharding: "Tensor",
    }),
    code: "insufficient_memory",
    node: "small",
    says: [
      "node gpu-small (small) cannot fit its share (1/2 of every tensor)",
      "needs 15.00 GB",
      "has 10.00 GB free",
    ],
  },
  {
    name: "Pipeline shares are re-checked per node after rounding",
    // 10 layers over 95 + 5 GB: 9.5 + 0.5 ideal -> 9 + 1 layers; the 5 GB node needs 10 GB for its layer.
    input: input({
      nodes: [node("a", 95), node("b", 5)],
      model: model({ weight_bytes: 100 * G }),
      minNodes: 2,
    }),
    code: "insufficient_memory",
    node: "b",
    says: ["(1 of 10 layers)", "needs 10.00 GB", "has 5.00 GB free"],
  },
  {
    name: "k nodes whose free memory together is too small are refused with the total",
    input: input({ nodes: [node("a", 5), node("b", 5), node("c", 5)], minNodes: 2 }),
    code: "insufficient_memory",
    says: ["have 10.00 GB free in total but 2 shares need 10.00 GB"],
  },
  {
    name: "a ring that exists only through a node too small for its share names that node",
    input: input({
      nodes: [node("a", 50), node("b", 50), node("c", 50), node("tiny", 0.5)],
      links: ring(["a", "b", "c", "tiny"]),
      minNodes: 4,
    }),
    code: "insufficient_memory",
    node: "tiny",
  },
  // Topology.
  {
    name: "no cycle for a topology gap: two islands of two cannot form a ring of four",
    input: input({
      nodes: [node("a", 50), node("b", 50), node("c", 50), node("d", 50)],
      links: [link("a", "b"), link("c", "d")],
      minNodes: 4,
    }),
    code: "no_cycle",
    says: ["no connected cycle of 4 nodes", "largest group"],
  },
  {
    name: "a path is not a cycle",
    input: input({
      nodes: [node("a", 50), node("b", 50), node("c", 50)],
      links: [link("a", "b"), link("b", "c")],
      minNodes: 3,
    }),
    code: "no_cycle",
  },
  {
    name: "a square has no ring of three (searched, not guessed)",
    input: input({
      nodes: [node("a", 50), node("b", 50), node("c", 50), node("d", 50)],
      links: ring(["a", "b", "c", "d"]),
      minNodes: 3,
    }),
    code: "no_cycle",
    says: ["no connected cycle of 3 nodes among the 4 candidate node(s)"],
  },
  {
    name: "two nodes need a direct link",
    input: input({ nodes: [node("a", 50), node("b", 50)], links: [], minNodes: 2 }),
    code: "no_cycle",
    says: ["2 nodes need a direct link"],
  },
  {
    name: "a cluster smaller than min_nodes has no such cycle",
    input: input({ nodes: [node("a", 64)], minNodes: 3 }),
    code: "no_cycle",
    says: ["the cluster has 1 node(s)"],
  },
  // Exclusions.
  {
    name: "exclusions that remove every candidate",
    input: input({ nodes: [node("a", 50), node("b", 50)], excluded: ["a", "b", "stale"] }),
    code: "all_excluded",
    says: ["all 2 node(s) are excluded"],
  },
  {
    name: "exclusions that leave fewer than min_nodes",
    input: input({ nodes: [node("a", 50), node("b", 50)], minNodes: 2, excluded: ["b"] }),
    code: "all_excluded",
    says: ["exclusions left 1 of 2 node(s); min_nodes is 2"],
  },
  // Pending info: never a false insufficient_memory on a fresh cluster.
  {
    name: "a freshly formed cluster (no memory gossiped yet) is info_pending",
    input: input({
      nodes: [node("a", null), node("b", null)],
      model: model({ weight_bytes: 500 * G }),
    }),
    code: "info_pending",
    says: ["gpu-a, gpu-b not yet known"],
  },
  {
    name: "one node still unknown is info_pending even when the known one is too small",
    input: input({ nodes: [node("a", null), node("b", 1)] }),
    code: "info_pending",
  },
  {
    name: "no members at all is info_pending",
    input: input({ nodes: [] }),
    code: "info_pending",
  },
  {
    name: "links not yet measured is info_pending for a multi-node ring",
    input: input({
      nodes: [node("a", 50), node("b", 50)],
      links: [],
      linksPending: true,
      minNodes: 2,
    }),
    code: "info_pending",
    says: ["link measurements"],
  },
  // Tensor support.
  {
    name: "Tensor on a model whose architecture cannot split rows",
    input: input({
      nodes: [node("a", 100)],
      model: model({ supports_tensor: false }),
      sharding: "Tensor",
    }),
    code: "tensor_unsupported",
  },
  {
    name: "Tensor across a node count that does not divide the heads",
    input: input({
      nodes: [node("a", 100), node("b", 100), node("c", 100)],
      minNodes: 3,
      sharding: "Tensor",
    }),
    code: "tensor_unsupported",
    says: ["32 attention heads", "across 3 nodes"],
  },
  // Invalid requests.
  ...[0, -1, 1.5, Number.NaN].map((k): RefusalCase => ({
    name: `min_nodes ${k}`,
    input: input({ nodes: [node("a", 50)], minNodes: k }),
    code: "invalid_request",
    says: ["min_nodes must be a positive integer"],
  })),
  {
    name: "Pipeline over more nodes than the model has layers",
    input: input({
      nodes: [node("a", 50), node("b", 50), node("c", 50)],
      model: model({ layers: 2 }),
      minNodes: 3,
    }),
    code: "invalid_request",
    says: ["2 layers, fewer than min_nodes 3"],
  },
  {
    name: "model facts without a layer count",
    input: input({ nodes: [node("a", 50)], model: model({ layers: 0 }) }),
    code: "invalid_request",
  },
  {
    name: "an overhead factor below 1",
    input: input({ nodes: [node("a", 50)], memory: { overheadFactor: 0.5 } }),
    code: "invalid_request",
  },
];

describe("refusals", () => {
  it.each(refusals.map((c) => [c.name, c] as const))("%s", (_name, c) => {
    const r = refused(place(c.input));
    expect(r.code).toBe(c.code);
    for (const s of c.says ?? []) expect(r.message).toContain(s);
    if (c.node !== undefined) expect(r.node_id).toBe(c.node);
    if (c.code !== "insufficient_memory") expect(r.node_id).toBeUndefined();
  });

  it.each([
    ["insufficient_memory", 400],
    ["no_cycle", 400],
    ["all_excluded", 400],
    ["tensor_unsupported", 400],
    ["invalid_request", 400],
    ["info_pending", 503],
  ] as const)("%s maps to HTTP %i", (code, status) => {
    expect(httpStatusFor(code)).toBe(status);
  });

  it("covers every refusal code in the status table", () => {
    expect(new Set(PLACEMENT_REFUSAL_CODES)).toEqual(new Set(refusals.map((c) => c.code)));
  });

  it("shows the full GB arithmetic: weights x overhead + KV cache + runner", () => {
    const r = refused(
      place(
        input({
          nodes: [node("a", 12.5)],
          memory: {
            overheadFactor: 1.2,
            runnerBytes: 0.5 * G,
            kvBytesPerElement: 2,
            contextSize: 4096,
          },
        }),
      ),
    );
    expect(r.message).toBe(
      "node gpu-a (a) cannot fit its share (the whole model): needs 12.67 GB (10.00 GB weights x 1.20 " +
        "overhead + 0.17 GB KV cache + 0.50 GB runner) but has 12.50 GB free",
    );
  });
});

describe("acceptance", () => {
  it("one byte more than the share fits", () => {
    const r = accepted(
      place(input({ nodes: [{ node_id: "a", name: "a", free_bytes: 10 * G + 1 }] })),
    );
    expect(r.shares).toEqual([
      {
        node_id: "a",
        name: "a",
        rank: 0,
        layers: 10,
        fraction: 1,
        weight_bytes: 10 * G,
        kv_bytes: 0,
        required_bytes: 10 * G,
        free_bytes: 10 * G + 1,
      },
    ]);
    expect(r.cycle_rtt_ms).toBe(0);
  });

  it.each([
    ["30 + 10 GB", [30, 10], 10, [8, 2]],
    ["64 + 32 GB", [64, 32], 40, [27, 13]],
    ["50 + 30 + 20 GB", [50, 30, 20], 80, [40, 24, 16]],
    ["equal nodes, remainder to rank 0", [40, 40, 40], 10, [4, 3, 3]],
  ])("Pipeline allocates layers proportionally to free memory: %s", (_name, free, layers, want) => {
    const names = free.map((_, i) => String.fromCharCode(97 + i));
    const r = accepted(
      place(
        input({
          nodes: free.map((f, i) => node(names[i]!, f)),
          model: model({ layers, weight_bytes: 1 * G, head_count: 0 }),
          minNodes: free.length,
        }),
      ),
    );
    expect(r.shares.map((s) => s.layers)).toEqual(want);
    expect(r.shares.map((s) => s.fraction)).toEqual(want.map((l) => l / layers));
  });

  it("Tensor splits weights and KV evenly", () => {
    const r = accepted(
      place(
        input({
          nodes: [node("a", 40), node("b", 20)],
          model: model({ weight_bytes: 30 * G }),
          minNodes: 2,
          sharding: "Tensor",
          memory: {},
        }),
      ),
    );
    expect(r.shares.map((s) => [s.fraction, s.weight_bytes])).toEqual([
      [0.5, 15 * G],
      [0.5, 15 * G],
    ]);
    expect(r.shares.every((s) => s.layers === undefined)).toBe(true);
    expect(r.shares[0]!.kv_bytes).toBe(r.shares[1]!.kv_bytes);
  });

  it("a ring of two is two linked nodes, and its latency is that link's", () => {
    const r = accepted(
      place(
        input({ nodes: [node("a", 50), node("b", 50)], links: [link("a", "b", 0.7)], minNodes: 2 }),
      ),
    );
    expect(r.shares.map((s) => s.node_id)).toEqual(["a", "b"]);
    expect(r.cycle_rtt_ms).toBe(0.7);
  });

  it("orders ranks around the ring, rank 0 the node with most free memory", () => {
    const links = ring(["a", "b", "c", "d"]);
    const r = accepted(
      place(
        input({
          nodes: [node("a", 20), node("b", 50), node("c", 30), node("d", 40)],
          links,
          minNodes: 4,
        }),
      ),
    );
    expect(r.shares.map((s) => s.rank)).toEqual([0, 1, 2, 3]);
    expect(r.shares[0]!.node_id).toBe("b");
    const order = r.shares.map((s) => s.node_id);
    for (let i = 0; i < order.length; i++) {
      const x = order[i]!;
      const y = order[(i + 1) % order.length]!;
      expect(links.some((l) => (l.a === x && l.b === y) || (l.a === y && l.b === x))).toBe(true);
    }
  });

  it("ignores unknown or stale exclusion ids and honours the others", () => {
    expect(ids(place(input({ nodes: [node("a", 50)], excluded: ["n-stale", "zzz"] })))).toEqual([
      "a",
    ]);
    expect(
      ids(place(input({ nodes: [node("a", 50), node("b", 40)], excluded: ["a", "ghost"] }))),
    ).toEqual(["b"]);
  });

  it("ignores an excluded node whose memory is still unknown", () => {
    expect(ids(place(input({ nodes: [node("a", null), node("b", 40)], excluded: ["a"] })))).toEqual(
      ["b"],
    );
  });

  it("a single node needs no links even while links are pending", () => {
    expect(ids(place(input({ nodes: [node("a", 50)], links: [], linksPending: true })))).toEqual([
      "a",
    ]);
  });
});

describe("preference", () => {
  it("prefers the nodes with most headroom", () => {
    const nodes = [node("a", 12), node("b", 80), node("c", 11), node("d", 90)];
    expect(ids(place(input({ nodes, minNodes: 2 })))).toEqual(["d", "b"]);
    expect(ids(place(input({ nodes, minNodes: 1 })))).toEqual(["d"]);
  });

  it("at equal headroom prefers the lowest-latency ring", () => {
    const nodes = [node("a", 50), node("b", 50), node("c", 50), node("d", 50)];
    const links = [
      link("a", "b", 5),
      link("a", "c", 0.1),
      link("a", "d", 0.1),
      link("b", "c", 5),
      link("b", "d", 5),
      link("c", "d", 0.1),
    ];
    const r = accepted(place(input({ nodes, links, minNodes: 3 })));
    expect(r.shares.map((s) => s.node_id)).toEqual(["a", "c", "d"]);
    expect(r.cycle_rtt_ms).toBeCloseTo(0.3);
  });

  it("orders a larger ring for latency (2-opt) without leaving the link graph", () => {
    const nodes = ["a", "b", "c", "d", "e"].map((id) => node(id, 50));
    // Fast outer ring a-b-c-d-e; every chord slow.
    const links = [...mesh(["a", "b", "c", "d", "e"], 9), ...ring(["a", "b", "c", "d", "e"], 1)];
    const r = accepted(place(input({ nodes, links, minNodes: 5 })));
    expect(r.cycle_rtt_ms).toBe(5);
  });

  it("breaks full ties by node id, deterministically", () => {
    const nodes = [node("n3", 50), node("n1", 50), node("n2", 50), node("n0", 50)];
    const r1 = ids(place(input({ nodes, minNodes: 2 })));
    const r2 = ids(place(input({ nodes: [...nodes].reverse(), minNodes: 2 })));
    expect(r1).toEqual(["n0", "n1"]);
    expect(r2).toEqual(r1);
  });
});
