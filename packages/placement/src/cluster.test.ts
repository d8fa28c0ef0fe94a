// Table tests of placement against the cluster as it stands: reservations of placed instances come off
// each node's memory without double counting, unhealthy nodes are refused by name, and the sequencer's
// re-check of a decided instance refuses the loser of a race with the same worded arithmetic.
import { describe, expect, it } from "vitest";
import { emptyState } from "@ic/protocol";
import type {
  ControlState,
  HealthEntry,
  Instance,
  InstanceId,
  ModelId,
  ModelRecord,
  NodeId,
  SessionId,
} from "@ic/protocol";
import {
  availableBytes,
  checkInstance,
  nodeCapacities,
  placeInCluster,
  previewCluster,
  unavailableReason,
} from "./cluster.ts";
import type { ClusterPlacementResult, NodeReport } from "./cluster.ts";
import type { MemoryModel } from "./memory.ts";

const G = 1e9;
const BARE: Partial<MemoryModel> = { overheadFactor: 1, runnerBytes: 0, kvBytesPerElement: 0 };
const S = "s-1" as SessionId;
const model: ModelRecord = {
  model_id: "org/m" as ModelId,
  file: "m.gguf",
  bytes: 6 * G,
  architecture: "llama",
  layers: 10,
  context_length: 4096,
  embedding_length: 4096,
  head_count: 32,
  head_count_kv: 8,
  supports_tensor: true,
};

interface NodeSpec {
  readonly id: string;
  readonly totalGb: number;
  readonly freeGb: number | null;
  readonly usable?: boolean;
  readonly health?: HealthEntry[];
  /** The engine probe's finding; absent: not probed. */
  readonly split?: {
    row_over_rpc: boolean;
    tensor_over_rpc: boolean;
    tensor_opt_in: boolean;
    evidence: string;
  };
  readonly backend?: "cpu" | "cuda";
  /** Free GB of each GPU (each 24 GB in total); the node reports their sum as its memory. */
  readonly gpusFreeGb?: number[];
}

function cluster(nodes: NodeSpec[], placed: Record<string, number>[] = []) {
  const state: ControlState = emptyState();
  state.session = {
    session_id: S,
    master_node_id: "n-a" as NodeId,
    master_peer_key: "p-a",
    master_started_at: 0,
    started_at: 0,
  };
  state.models[model.model_id] = model;
  for (const n of nodes) {
    state.members[`n-${n.id}`] = {
      node_id: `n-${n.id}` as NodeId,
      peer_key: `p-${n.id}`,
      name: `node-${n.id}`,
      api_url: "",
      host: "",
      started_at: 0,
      joined_at: 0,
    };
  }
  placed.forEach((shares, i) => {
    state.instances[`i-${i}`] = instance(`i-${i}`, shares);
  });
  const reports: NodeReport[] = nodes.map((n) => ({
    peer_key: `p-${n.id}`,
    telemetry:
      n.freeGb === null
        ? null
        : {
            memory_total_bytes: n.totalGb * G,
            memory_free_bytes: n.freeGb * G,
            gpus: (n.gpusFreeGb ?? []).map((f) => ({
              vendor: "NVIDIA",
              model: "test GPU",
              vram_total_bytes: 24 * G,
              vram_free_bytes: f * G,
            })),
            disk_free_bytes: null,
            engine: {
              server_bin: "/bin/llama-server",
              rpc_bin: null,
              backend: n.backend ?? "cpu",
              usable: n.usable ?? true,
              ...(n.usable === false ? { problem: "not found" } : {}),
              overridden: false,
              ...(n.split ? { split: n.split } : {}),
            },
            declared_backend: "auto",
          },
    health: n.health ?? [],
    links: nodes.filter((o) => o.id !== n.id).map((o) => ({ peer_key: `p-${o.id}`, rtt_ms: 1 })),
  }));
  return { state, reports };
}

/** An instance with one share per node: `{ a: 5 }` = 5 GB required on node a (rank order as listed). */
function instance(id: string, shares: Record<string, number>): Instance {
  return {
    instance_id: id as InstanceId,
    model_id: model.model_id,
    sharding: "Pipeline",
    created_at: 0,
    assignments: Object.entries(shares).map(([node, gbs], rank, all) => ({
      node_id: `n-${node}` as NodeId,
      peer_key: `p-${node}`,
      rank,
      layers: all.length === 1 ? 10 : Math.round(10 / all.length),
      weight_bytes: gbs * G,
      required_bytes: gbs * G,
    })),
  };
}

const placedOn = (r: ClusterPlacementResult) => {
  if (!r.ok) throw new Error(`refused ${r.code}: ${r.message}`);
  return r.shares.map((s) => s.node_id);
};

describe("availableBytes: reservations come off the total, the reported free figure caps", () => {
  const cases: { name: string; total: number; free: number; reserved: number; want: number }[] = [
    {
      name: "nothing placed: the reported free figure",
      total: 16,
      free: 12,
      reserved: 0,
      want: 12,
    },
    {
      name: "placed, not loaded yet (free still high): total minus reservation",
      total: 16,
      free: 15,
      reserved: 7,
      want: 9,
    },
    {
      name: "GPU, runner loaded (its VRAM already gone from free): not counted twice",
      total: 16,
      free: 9,
      reserved: 7,
      want: 9,
    },
    {
      name: "CPU, weights mmapped (page cache counts as free): the reservation still holds",
      total: 16,
      free: 14,
      reserved: 7,
      want: 9,
    },
    { name: "other processes use memory: free caps", total: 16, free: 4, reserved: 7, want: 4 },
    { name: "over-reserved: never negative", total: 8, free: 8, reserved: 9, want: 0 },
  ];
  it.each(cases)("$name", (c) => {
    expect(availableBytes(c.total * G, c.free * G, c.reserved * G)).toBe(c.want * G);
  });
});

describe("unavailableReason", () => {
  const entry = (severity: "error" | "warn", code = "gpu_serving_disabled"): HealthEntry => ({
    code: code as HealthEntry["code"],
    severity,
    message: `${code} happened`,
    remediation: "fix it",
  });
  const tele = (usable: boolean) =>
    cluster([{ id: "a", totalGb: 8, freeGb: 8, usable }]).reports[0]!;
  it.each([
    { name: "healthy", report: { ...tele(true), health: [] }, want: null },
    { name: "a warning only", report: { ...tele(true), health: [entry("warn")] }, want: null },
    {
      name: "an error-level entry",
      report: { ...tele(true), health: [entry("error")] },
      want: "gpu_serving_disabled",
    },
    {
      name: "an unusable engine, no entry",
      report: { ...tele(false), health: [] },
      want: "invalid_engine_binary",
    },
    {
      name: "an unusable engine with its warn entry",
      report: { ...tele(false), health: [entry("warn", "invalid_engine_binary")] },
      want: "invalid_engine_binary",
    },
    { name: "telemetry not heard", report: { ...tele(true), telemetry: null }, want: null },
    {
      name: "the intent store without a quorum is the cluster's trouble, not the node's",
      report: { ...tele(true), health: [entry("error", "intent_store_unavailable")] },
      want: null,
    },
  ])("$name", ({ report, want }) => {
    expect(unavailableReason(report)?.health_code ?? null).toBe(want);
  });
});

describe("nodeCapacities", () => {
  it("sums the shares of every placed instance per node", () => {
    const { state, reports } = cluster(
      [
        { id: "a", totalGb: 16, freeGb: 16 },
        { id: "b", totalGb: 16, freeGb: 16 },
        { id: "c", totalGb: 16, freeGb: null },
      ],
      [{ a: 4 }, { a: 3, b: 2 }],
    );
    const caps = nodeCapacities(state, reports);
    expect(caps.map((c) => [c.name, c.reserved_bytes / G, c.free_bytes])).toEqual([
      ["node-a", 7, 9 * G],
      ["node-b", 2, 14 * G],
      ["node-c", 0, null],
    ]);
  });
});

describe("placeInCluster with no context configured", () => {
  // 40,960 bytes of KV cache per token (10 layers x K and V x 8 KV heads x 128 x 2 bytes):
  // 5.37 GB at the trained 131,072 tokens, 2.68 GB at 65,536, 0.34 GB at 8,192, 0.17 GB at 4,096.
  const long: ModelRecord = { ...model, context_length: 131_072 };
  const mem: Partial<MemoryModel> = { overheadFactor: 1, runnerBytes: 0, kvBytesPerElement: 2 };
  it.each([
    [16, 131_072],
    [10, 65_536],
    [6.4, 8192],
    [6.2, 4096],
  ])("a node with %d GB free gets the largest context that fits: %d", (freeGb, want) => {
    const { state, reports } = cluster([{ id: "a", totalGb: 32, freeGb }]);
    state.models[long.model_id] = long;
    const r = placeInCluster(state, reports, {
      model: long,
      minNodes: 1,
      sharding: "Pipeline",
      memory: mem,
    });
    expect(r.ok && r.context_size).toBe(want);
  });

  it("refuses, as before, when not even 4096 tokens fit; a configured context is used as it is", () => {
    const { state, reports } = cluster([{ id: "a", totalGb: 32, freeGb: 6 }]);
    const req = { model: long, minNodes: 1, sharding: "Pipeline" as const };
    const r = placeInCluster(state, reports, { ...req, memory: mem });
    expect(r.ok).toBe(false);
    expect(!r.ok && r.code).toBe("insufficient_memory");
    const fixed = placeInCluster(
      cluster([{ id: "a", totalGb: 32, freeGb: 16 }]).state,
      cluster([{ id: "a", totalGb: 32, freeGb: 16 }]).reports,
      { ...req, memory: { ...mem, contextSize: 8192 } },
    );
    expect(fixed.ok && fixed.context_size).toBe(8192);
  });

  it("previews pick a context per entry the same way", () => {
    const { state, reports } = cluster([
      { id: "a", totalGb: 32, freeGb: 10 },
      { id: "b", totalGb: 32, freeGb: 10 },
    ]);
    state.models[long.model_id] = long;
    const p = previewCluster(state, reports, { model: long, memory: mem });
    const pipeline1 = p.previews.find((e) => e.sharding === "Pipeline" && e.nodes === 1)!;
    const pipeline2 = p.previews.find((e) => e.sharding === "Pipeline" && e.nodes === 2)!;
    expect(pipeline1.result.ok && pipeline1.result.context_size).toBe(65_536);
    // Two nodes hold half of the weights and half of the KV cache each: the whole context fits.
    expect(pipeline2.result.ok && pipeline2.result.context_size).toBe(131_072);
  });
});

describe("placeInCluster", () => {
  it("sequential placements see earlier reservations", () => {
    const { state, reports } = cluster([{ id: "a", totalGb: 10, freeGb: 10 }]);
    const req = { model, minNodes: 1, sharding: "Pipeline" as const, memory: BARE };
    expect(placedOn(placeInCluster(state, reports, req))).toEqual(["n-a"]);
    state.instances["i-x"] = instance("i-x", { a: 6 });
    const r = placeInCluster(state, reports, req);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.code).toBe("insufficient_memory");
    expect(r.node_id).toBe("n-a");
    expect(r.message).toContain("node node-a (n-a) cannot fit its share (the whole model)");
    expect(r.message).toContain("needs 6.00 GB");
    expect(r.message).toContain("but has 4.00 GB free");
    expect(r.message).toContain("6.00 GB of its 10.00 GB is reserved");
  });

  it("goes to another node when the first is reserved", () => {
    const { state, reports } = cluster(
      [
        { id: "a", totalGb: 10, freeGb: 10 },
        { id: "b", totalGb: 8, freeGb: 8 },
      ],
      [{ a: 6 }],
    );
    const r = placeInCluster(state, reports, {
      model,
      minNodes: 1,
      sharding: "Pipeline",
      memory: BARE,
    });
    expect(placedOn(r)).toEqual(["n-b"]);
  });

  const unhealthy: HealthEntry = {
    code: "gpu_serving_disabled",
    severity: "error",
    message: "CPU-only engine on a GPU node",
    remediation: "rebuild",
  };
  const refusals: {
    name: string;
    nodes: NodeSpec[];
    minNodes: number;
    excluded?: string[];
    code: string;
    node?: string;
    health?: string;
    text: string;
  }[] = [
    {
      name: "the only node has an unusable engine",
      nodes: [{ id: "a", totalGb: 16, freeGb: 16, usable: false }],
      minNodes: 1,
      code: "node_unhealthy",
      node: "n-a",
      health: "invalid_engine_binary",
      text: "node node-a (n-a) is not a candidate (invalid_engine_binary:",
    },
    {
      name: "the ring needs the node with an error-level health entry",
      nodes: [
        { id: "a", totalGb: 16, freeGb: 16 },
        { id: "b", totalGb: 16, freeGb: 16, health: [unhealthy] },
      ],
      minNodes: 2,
      code: "node_unhealthy",
      node: "n-b",
      health: "gpu_serving_disabled",
      text: "node node-b (n-b) is not a candidate (gpu_serving_disabled: CPU-only engine",
    },
    {
      name: "it would not fit on the unhealthy node either: the memory refusal stands",
      nodes: [
        { id: "a", totalGb: 4, freeGb: 4 },
        { id: "b", totalGb: 4, freeGb: 4, usable: false },
      ],
      minNodes: 1,
      code: "insufficient_memory",
      node: "n-a",
      text: "is not a candidate (invalid_engine_binary",
    },
    {
      name: "an excluded unhealthy node is not blamed",
      nodes: [
        { id: "a", totalGb: 16, freeGb: 16 },
        { id: "b", totalGb: 16, freeGb: 16, usable: false },
      ],
      minNodes: 2,
      excluded: ["n-b"],
      code: "all_excluded",
      text: "exclusions left 1 of 2 node(s)",
    },
  ];
  it.each(refusals)("refuses: $name", (c) => {
    const { state, reports } = cluster(c.nodes);
    const r = placeInCluster(state, reports, {
      model,
      minNodes: c.minNodes,
      sharding: "Pipeline",
      excluded: c.excluded ?? [],
      memory: BARE,
    });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.code).toBe(c.code);
    expect(r.node_id).toBe(c.node);
    expect(r.health_code).toBe(c.health);
    expect(r.message).toContain(c.text);
  });

  it("places around an unhealthy node when a healthy one fits", () => {
    const { state, reports } = cluster([
      { id: "a", totalGb: 32, freeGb: 32, usable: false },
      { id: "b", totalGb: 8, freeGb: 8 },
    ]);
    const r = placeInCluster(state, reports, {
      model,
      minNodes: 1,
      sharding: "Pipeline",
      memory: BARE,
    });
    expect(placedOn(r)).toEqual(["n-b"]);
  });
});

describe("previewCluster", () => {
  it("shows each node's capacity and why a combination needs an unhealthy node", () => {
    const { state, reports } = cluster(
      [
        { id: "a", totalGb: 16, freeGb: 16 },
        { id: "b", totalGb: 16, freeGb: 16, usable: false },
      ],
      [{ a: 4 }],
    );
    const { capacities, previews } = previewCluster(state, reports, { model, memory: BARE });
    expect(capacities.map((c) => [c.name, c.free_bytes, c.unavailable?.health_code])).toEqual([
      ["node-a", 12 * G, undefined],
      ["node-b", 16 * G, "invalid_engine_binary"],
    ]);
    const two = previews.find((p) => p.sharding === "Pipeline" && p.nodes === 2)!;
    expect(two.result.ok).toBe(false);
    if (!two.result.ok) expect(two.result.code).toBe("node_unhealthy");
    const one = previews.find((p) => p.sharding === "Pipeline" && p.nodes === 1)!;
    expect(placedOn(one.result)).toEqual(["n-a"]);
  });
});

describe("Tensor across nodes: only with an engine that splits tensors over rpc", () => {
  /** This build with the operator's opt-in: the experimental tensor mode served the probe. */
  const yes = {
    row_over_rpc: false,
    tensor_over_rpc: true,
    tensor_opt_in: true,
    evidence: "tensor: served",
  };
  const no = {
    row_over_rpc: false,
    tensor_over_rpc: false,
    tensor_opt_in: false,
    evidence: "row: device RPC0 does not support split buffers",
  };
  const two = (a: NodeSpec["split"], b: NodeSpec["split"], backend: "cpu" | "cuda" = "cuda") =>
    cluster([
      { id: "a", totalGb: 64, freeGb: 64, backend, ...(a ? { split: a } : {}) },
      { id: "b", totalGb: 64, freeGb: 64, backend, ...(b ? { split: b } : {}) },
    ]);
  const req = (excluded: string[] = []) => ({
    model,
    minNodes: 2,
    sharding: "Tensor" as const,
    excluded,
    memory: BARE,
  });
  it.each([
    { name: "both engines split over rpc: placed", a: yes, b: yes, code: null },
    {
      name: "row split over rpc is enough too",
      a: { ...no, row_over_rpc: true },
      b: yes,
      code: null,
    },
    {
      name: "one engine cannot: refused naming it and its words",
      a: yes,
      b: no,
      code: "tensor_unsupported",
    },
    {
      name: "an engine not probed counts as cannot",
      a: yes,
      b: undefined,
      code: "tensor_unsupported",
    },
  ])("$name", ({ a, b, code }) => {
    const { state, reports } = two(a, b);
    const r = placeInCluster(state, reports, req());
    if (code === null) expect(r.ok).toBe(true);
    else {
      expect(r.ok ? null : r.code).toBe(code);
      expect(r.ok ? "" : r.message).toMatch(/engine of node node-b \(n-b\) does not \(/);
      expect(r.ok ? "" : r.message).toMatch(/use Pipeline sharding for min_nodes > 1/);
      if (b?.tensor_over_rpc)
        expect(r.ok ? "" : r.message).toMatch(
          /unless every node sets engine.experimental_tensor_split/,
        );
    }
  });

  it("a CPU engine that splits over rpc still cannot: llama-server holds no share on the CPU", () => {
    const { state, reports } = two(yes, yes, "cpu");
    const r = placeInCluster(state, reports, req());
    expect(r.ok ? null : r.code).toBe("tensor_unsupported");
    expect(r.ok ? "" : r.message).toMatch(/serves on the CPU \(cpu engine\)/);
  });

  it("Tensor on one node, and Pipeline across nodes, need no such engine", () => {
    const { state, reports } = two(no, no);
    expect(placeInCluster(state, reports, { ...req(), minNodes: 1 }).ok).toBe(true);
    expect(placeInCluster(state, reports, { ...req(), sharding: "Pipeline" }).ok).toBe(true);
    const p = previewCluster(state, reports, { model, memory: BARE });
    expect(
      p.previews.map((e) => `${e.sharding}/${e.nodes}:${e.result.ok ? "ok" : e.result.code}`),
    ).toEqual(["Pipeline/1:ok", "Pipeline/2:ok", "Tensor/1:ok", "Tensor/2:tensor_unsupported"]);
  });

  it("the sequencer refuses a Tensor instance across nodes whose engines cannot split", () => {
    const { state, reports } = two(yes, no);
    const inst: Instance = { ...instance("i-t", { a: 3, b: 3 }), sharding: "Tensor" };
    expect(checkInstance(state, reports, { instance: inst, model, memory: BARE })?.code).toBe(
      "tensor_unsupported",
    );
    const ok = two(yes, yes);
    expect(checkInstance(ok.state, ok.reports, { instance: inst, model, memory: BARE })).toBeNull();
  });
});

describe("checkInstance: the sequencer's re-check", () => {
  const nodes: NodeSpec[] = [
    { id: "a", totalGb: 10, freeGb: 10 },
    { id: "b", totalGb: 10, freeGb: 10, usable: false },
  ];
  const cases: {
    name: string;
    placed: Record<string, number>[];
    inst: Record<string, number>;
    code: string | null;
    text?: string;
  }[] = [
    { name: "fits on an empty node", placed: [], inst: { a: 6 }, code: null },
    {
      name: "the loser of a race: the winner already holds the memory",
      placed: [{ a: 6 }],
      inst: { a: 6 },
      code: "insufficient_memory",
      text: "node node-a (n-a) cannot fit its share (the whole model): needs 6.00 GB (6.00 GB weights x 1.00 overhead + 0.00 GB KV cache + 0.00 GB runner) but has 4.00 GB free",
    },
    {
      name: "equal to free is refused",
      placed: [{ a: 4 }],
      inst: { a: 6 },
      code: "insufficient_memory",
      text: "(a share must be strictly less than free memory)",
    },
    {
      name: "a node with an unusable engine",
      placed: [],
      inst: { b: 2 },
      code: "node_unhealthy",
      text: "node node-b (n-b) is not a candidate (invalid_engine_binary",
    },
    { name: "not a member", placed: [], inst: { z: 1 }, code: "all_excluded" },
  ];
  it.each(cases)("$name", (c) => {
    const { state, reports } = cluster(nodes, c.placed);
    const r = checkInstance(state, reports, {
      instance: instance("i-new", c.inst),
      model,
      memory: BARE,
    });
    expect(r?.code ?? null).toBe(c.code);
    if (c.text) expect(r?.message).toContain(c.text);
  });
});

describe("per GPU: a layer share spreads over a node's GPUs in whole layers", () => {
  const mem = { ...BARE, runnerBytes: 0.5 * G };
  // 6 GB in 10 layers: 5 per GPU is 3.0 GB plus each GPU's 0.5 GB runner allowance.
  const twoGpus = (freeEach: number, backend: "cpu" | "cuda" = "cuda"): NodeSpec => ({
    id: "a",
    totalGb: 48,
    freeGb: 2 * freeEach,
    backend,
    gpusFreeGb: [freeEach, freeEach],
  });

  it("refuses a share the node holds in sum but its GPUs do not, naming the GPU and the figures", () => {
    const { state, reports } = cluster([twoGpus(3.4)]);
    const r = placeInCluster(state, reports, {
      model,
      minNodes: 1,
      sharding: "Pipeline",
      memory: mem,
    });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.code).toBe("insufficient_memory");
    expect(r.node_id).toBe("n-a");
    expect(r.message).toBe(
      "node node-a (n-a) cannot fit its share (the whole model) on its 2 GPUs: spread by free memory, whole layers each, GPU 0 would hold 5 of 10 layers and need 3.50 GB (its layers and KV cache x overhead + its runner allowance) but has 3.40 GB free; the node has 6.80 GB free in all, and a layer cannot be divided between GPUs (Tensor sharding splits every layer across a node's GPUs)",
    );
    // The previews say the same, before anything starts.
    const p = previewCluster(state, reports, { model, memory: mem });
    const one = p.previews.find((e) => e.sharding === "Pipeline" && e.nodes === 1)!;
    expect(one.result.ok).toBe(false);
  });

  it("places it where each GPU holds its layers, or as a Tensor row split, or on a CPU engine", () => {
    const req = { model, minNodes: 1, sharding: "Pipeline" as const, memory: mem };
    const roomy = cluster([twoGpus(3.6)]);
    expect(placedOn(placeInCluster(roomy.state, roomy.reports, req))).toEqual(["n-a"]);
    const tight = cluster([twoGpus(3.4)]);
    expect(
      placedOn(placeInCluster(tight.state, tight.reports, { ...req, sharding: "Tensor" })),
    ).toEqual(["n-a"]);
    const cpu = cluster([twoGpus(3.4, "cpu")]);
    expect(placedOn(placeInCluster(cpu.state, cpu.reports, req))).toEqual(["n-a"]);
  });

  it("reservations come off each GPU by its size, and the sequencer re-checks per GPU", () => {
    const { state, reports } = cluster([twoGpus(20)], [{ a: 33 }]);
    // 48 GB total - 33 reserved = 15 GB: 7.5 GB per GPU of equal size.
    expect(nodeCapacities(state, reports)[0]!.gpus_free_bytes).toEqual([7.5 * G, 7.5 * G]);
    const tight = cluster([twoGpus(3.4)]);
    const inst = instance("i-new", { a: 6 });
    expect(
      checkInstance(tight.state, tight.reports, { instance: inst, model, memory: mem })?.message,
    ).toContain(
      "on its 2 GPUs: spread by free memory, whole layers each, GPU 0 would hold 5 of 10 layers",
    );
    const roomy = cluster([twoGpus(3.6)]);
    expect(
      checkInstance(roomy.state, roomy.reports, { instance: inst, model, memory: mem }),
    ).toBeNull();
  });
});
