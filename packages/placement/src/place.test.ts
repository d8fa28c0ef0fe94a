import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { kvCacheBytes, splitLayers } from "./memory.ts";
import type { MemoryModel, ModelFacts } from "./memory.ts";
import { httpStatusOf, place, previews } from "./place.ts";
import type { CandidateNode, LinkEdge, PlacementResult } from "./place.ts";

const G = 1e9;
/** A memory model without KV or runner allowance, so the arithmetic in tests is exact. */
const BARE: Partial<MemoryModel> = { overheadFactor: 1.0, runnerBytes: 0, kvBytesPerElement: 0 };

function model(over: Partial<ModelFacts> = {}): ModelFacts {
  return {
    model_id: "org/m",
    weight_bytes: 10 * G,
    layers: 10,
    context_length: 4096,
    embedding_length: 4096,
    head_count: 32,
    head_count_kv: 8,
    supports_tensor: true,
    ...over,
  };
}
const node = (id: string, freeGb: number | null): CandidateNode => ({
  node_id: id,
  name: `gpu-${id}`,
  free_bytes: freeGb === null ? null : freeGb * G,
});
const ring = (ids: string[]): LinkEdge[] =>
  ids.map((a, i) => ({ a, b: ids[(i + 1) % ids.length]!, rtt_ms: 1 }));
const full = (ids: string[]): LinkEdge[] =>
  ids.flatMap((a, i) => ids.slice(i + 1).map((b) => ({ a, b, rtt_ms: 1 })));

function refusal(r: PlacementResult) {
  if (r.ok) throw new Error("expected a refusal");
  return r;
}
function accepted(r: PlacementResult) {
  if (!r.ok) throw new Error(`expected acceptance, got ${r.code}: ${r.message}`);
  return r;
}

describe("memory model", () => {
  it("never sums memory across nodes: two 6 GB nodes cannot hold a 10 GB model on one node", () => {
    const r = refusal(
      place({
        nodes: [node("a", 6), node("b", 6)],
        links: full(["a", "b"]),
        model: model(),
        minNodes: 1,
        sharding: "Pipeline",
        memory: BARE,
      }),
    );
    expect(r.code).toBe("insufficient_memory");
  });
  it("rejects a share exactly equal to free memory and accepts one byte more", () => {
    const exact = refusal(
      place({
        nodes: [node("a", 10)],
        links: [],
        model: model(),
        minNodes: 1,
        sharding: "Pipeline",
        memory: BARE,
      }),
    );
    expect(exact.code).toBe("insufficient_memory");
    const plus = place({
      nodes: [{ node_id: "a", name: "a", free_bytes: 10 * G + 1 }],
      links: [],
      model: model(),
      minNodes: 1,
      sharding: "Pipeline",
      memory: BARE,
    });
    expect(plus.ok).toBe(true);
  });
  it("applies the overhead factor, KV cache and runner allowance, and says so in the message", () => {
    const mem = {
      overheadFactor: 1.2,
      runnerBytes: 0.5 * G,
      kvBytesPerElement: 2,
      contextSize: 4096,
    };
    const m = model();
    const kv = kvCacheBytes(m, { ...mem });
    expect(kv).toBe(2 * 10 * 4096 * 1024 * 2);
    const r = refusal(
      place({
        nodes: [node("a", 12.5)],
        links: [],
        model: m,
        minNodes: 1,
        sharding: "Pipeline",
        memory: mem,
      }),
    );
    expect(r.message).toContain("node gpu-a (a) cannot fit its share");
    expect(r.message).toContain(
      "needs 12.67 GB (10.00 GB weights x 1.20 overhead + 0.17 GB KV cache + 0.50 GB runner) but has 12.50 GB free",
    );
    expect(httpStatusOf(r.code)).toBe(400);
  });
});

describe("sharding", () => {
  it("Pipeline allocates layers proportionally to free memory, at least one each, summing to the total", () => {
    expect(splitLayers(10, [30, 10])).toEqual([8, 2]);
    expect(splitLayers(4, [100, 1, 1, 1])).toEqual([1, 1, 1, 1]);
    expect(splitLayers(3, [1, 1, 1, 1])).toBeNull();
    expect(splitLayers(7, [0, 0, 0])).toEqual([3, 2, 2]);
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 200 }),
        fc.array(fc.integer({ min: 0, max: 1000 }), { minLength: 1, maxLength: 16 }),
        (layers, free) => {
          const s = splitLayers(layers, free);
          if (layers < free.length) return s === null;
          return s !== null && s.every((x) => x >= 1) && s.reduce((a, b) => a + b, 0) === layers;
        },
      ),
    );
    const r = accepted(
      place({
        nodes: [node("a", 30), node("b", 10)],
        links: full(["a", "b"]),
        model: model({ layers: 10 }),
        minNodes: 2,
        sharding: "Pipeline",
        memory: BARE,
      }),
    );
    expect(r.shares.map((s) => [s.node_id, s.layers])).toEqual([
      ["a", 8],
      ["b", 2],
    ]);
  });
  it("Tensor splits evenly and refuses the small node of a 10 GB + 100 GB pair, naming it", () => {
    const r = refusal(
      place({
        nodes: [node("small", 10), node("big", 100)],
        links: full(["small", "big"]),
        model: model({ weight_bytes: 30 * G }),
        minNodes: 2,
        sharding: "Tensor",
        memory: BARE,
      }),
    );
    expect(r.code).toBe("insufficient_memory");
    expect(r.node_id).toBe("small");
    expect(r.message).toContain("gpu-small");
    expect(r.message).toContain("needs 15.00 GB");
    expect(r.message).toContain("has 10.00 GB free");
    // The same pair holds it with Pipeline: layers follow free memory.
    expect(
      place({
        nodes: [node("small", 10), node("big", 100)],
        links: full(["small", "big"]),
        model: model({ weight_bytes: 30 * G }),
        minNodes: 2,
        sharding: "Pipeline",
        memory: BARE,
      }).ok,
    ).toBe(true);
  });
  it("refuses Tensor for a model that does not support it, or whose heads do not divide", () => {
    expect(
      refusal(
        place({
          nodes: [node("a", 100)],
          links: [],
          model: model({ supports_tensor: false }),
          minNodes: 1,
          sharding: "Tensor",
        }),
      ).code,
    ).toBe("tensor_unsupported");
    expect(
      refusal(
        place({
          nodes: [node("a", 100), node("b", 100), node("c", 100)],
          links: full(["a", "b", "c"]),
          model: model({ head_count: 32 }),
          minNodes: 3,
          sharding: "Tensor",
        }),
      ).code,
    ).toBe("tensor_unsupported");
  });
});

describe("topology", () => {
  it("needs a connected cycle of min_nodes nodes", () => {
    // a-b-c is a path, not a cycle.
    const r = refusal(
      place({
        nodes: [node("a", 50), node("b", 50), node("c", 50)],
        links: [
          { a: "a", b: "b", rtt_ms: 1 },
          { a: "b", b: "c", rtt_ms: 1 },
        ],
        model: model(),
        minNodes: 3,
        sharding: "Pipeline",
      }),
    );
    expect(r.code).toBe("no_cycle");
    expect(
      accepted(
        place({
          nodes: [node("a", 50), node("b", 50), node("c", 50)],
          links: ring(["a", "b", "c"]),
          model: model(),
          minNodes: 3,
          sharding: "Pipeline",
        }),
      ).shares,
    ).toHaveLength(3);
  });
  it("a topology gap (two islands) gives no_cycle for a pair across it", () => {
    const r = refusal(
      place({
        nodes: [node("a", 50), node("b", 50)],
        links: [],
        model: model(),
        minNodes: 2,
        sharding: "Pipeline",
      }),
    );
    expect(r.code).toBe("no_cycle");
  });
  it("orders ranks along the cycle and starts from the node with most free memory", () => {
    const r = accepted(
      place({
        nodes: [node("a", 20), node("b", 50), node("c", 30), node("d", 40)],
        links: ring(["a", "b", "c", "d"]),
        model: model(),
        minNodes: 4,
        sharding: "Pipeline",
      }),
    );
    const ids = r.shares.map((s) => s.node_id);
    expect(ids[0]).toBe("b");
    for (let i = 0; i < ids.length; i++) {
      const x = ids[i]!;
      const y = ids[(i + 1) % ids.length]!;
      expect(
        ring(["a", "b", "c", "d"]).some(
          (l) => (l.a === x && l.b === y) || (l.a === y && l.b === x),
        ),
      ).toBe(true);
    }
  });
});

describe("exclusions and pending info", () => {
  it("ignores unknown or stale exclusion ids", () => {
    expect(
      place({
        nodes: [node("a", 50)],
        links: [],
        model: model(),
        minNodes: 1,
        sharding: "Pipeline",
        excluded: ["n-stale", "zzz"],
      }).ok,
    ).toBe(true);
  });
  it("excludes by node id and refuses when exclusions remove every candidate", () => {
    const r = accepted(
      place({
        nodes: [node("a", 50), node("b", 40)],
        links: [],
        model: model(),
        minNodes: 1,
        sharding: "Pipeline",
        excluded: ["a"],
      }),
    );
    expect(r.shares[0]!.node_id).toBe("b");
    expect(
      refusal(
        place({
          nodes: [node("a", 50)],
          links: [],
          model: model(),
          minNodes: 1,
          sharding: "Pipeline",
          excluded: ["a"],
        }),
      ).code,
    ).toBe("all_excluded");
    expect(
      refusal(
        place({
          nodes: [node("a", 50), node("b", 50)],
          links: full(["a", "b"]),
          model: model(),
          minNodes: 2,
          sharding: "Pipeline",
          excluded: ["b"],
        }),
      ).code,
    ).toBe("all_excluded");
  });
  it("a freshly formed cluster reports info_pending (503), never a false insufficient_memory", () => {
    const r = refusal(
      place({
        nodes: [node("a", null), node("b", 1)],
        links: [],
        model: model(),
        minNodes: 1,
        sharding: "Pipeline",
      }),
    );
    expect(r.code).toBe("info_pending");
    expect(httpStatusOf(r.code)).toBe(503);
    expect(
      refusal(place({ nodes: [], links: [], model: model(), minNodes: 1, sharding: "Pipeline" }))
        .code,
    ).toBe("info_pending");
    expect(
      refusal(
        place({
          nodes: [node("a", 50), node("b", 50)],
          links: [],
          linksPending: true,
          model: model(),
          minNodes: 2,
          sharding: "Pipeline",
        }),
      ).code,
    ).toBe("info_pending");
  });
});

describe("previews", () => {
  it("lists every sharding x node count with its placement or reason", () => {
    const p = previews({
      nodes: [node("a", 50), node("b", 8)],
      links: full(["a", "b"]),
      model: model({ weight_bytes: 10 * G }),
      memory: BARE,
    });
    expect(p.map((e) => `${e.sharding}/${e.nodes}:${e.result.ok ? "ok" : e.result.code}`)).toEqual([
      "Pipeline/1:ok",
      "Pipeline/2:ok",
      "Tensor/1:ok",
      "Tensor/2:ok",
    ]);
    const excl = previews({
      nodes: [node("a", 50), node("b", 8)],
      links: full(["a", "b"]),
      model: model({ weight_bytes: 5 * G }),
      memory: BARE,
      excluded: ["a"],
    });
    expect(excl.find((e) => e.sharding === "Pipeline" && e.nodes === 1)!.result).toMatchObject({
      ok: true,
    });
    expect(excl.find((e) => e.sharding === "Pipeline" && e.nodes === 2)!.result).toMatchObject({
      ok: false,
      code: "all_excluded",
    });
  });
});

describe("properties", () => {
  const arbCluster = fc.record({
    free: fc.array(fc.integer({ min: 0, max: 200 }), { minLength: 1, maxLength: 12 }),
    edges: fc.array(fc.tuple(fc.nat(11), fc.nat(11)), { maxLength: 40 }),
    k: fc.integer({ min: 1, max: 6 }),
    layers: fc.integer({ min: 1, max: 80 }),
    weight: fc.integer({ min: 1, max: 300 }),
    tensor: fc.boolean(),
  });
  it("no accepted placement puts any node at or over its free memory, and layers sum to the model's", () => {
    fc.assert(
      fc.property(arbCluster, (c) => {
        const nodes = c.free.map((f, i) => node(String(i), f));
        const links = c.edges
          .filter(([a, b]) => a < nodes.length && b < nodes.length)
          .map(([a, b]) => ({ a: String(a), b: String(b), rtt_ms: 1 }));
        const m = model({ layers: c.layers, weight_bytes: c.weight * G, head_count: 12 });
        const r = place({
          nodes,
          links,
          model: m,
          minNodes: c.k,
          sharding: c.tensor ? "Tensor" : "Pipeline",
        });
        if (!r.ok) return true;
        expect(r.shares).toHaveLength(c.k);
        expect(new Set(r.shares.map((s) => s.node_id)).size).toBe(c.k);
        for (const s of r.shares) expect(s.required_bytes).toBeLessThan(s.free_bytes);
        if (!c.tensor) {
          expect(r.shares.reduce((t, s) => t + (s.layers ?? 0), 0)).toBe(c.layers);
          for (const s of r.shares) expect(s.layers).toBeGreaterThanOrEqual(1);
        }
        return true;
      }),
      { numRuns: 500 },
    );
  });
});
