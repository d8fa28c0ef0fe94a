// Table tests of making room for an on-demand load: the fewest least recently used idle on-demand
// instances go, only those on the nodes the load lands on, never one in use or an operator's.
import { describe, expect, it } from "vitest";
import { emptyState } from "@ic/protocol";
import type {
  ControlState,
  Deployment,
  InstanceId,
  ModelId,
  ModelRecord,
  NodeId,
} from "@ic/protocol";
import type { NodeReport } from "./cluster.ts";
import type { MemoryModel } from "./memory.ts";
import { planLoad, unloadCandidates } from "./room.ts";
import type { InstanceUse } from "./room.ts";

const G = 1e9;
const BARE: Partial<MemoryModel> = { overheadFactor: 1, runnerBytes: 0, kvBytesPerElement: 0 };

function modelOf(id: string, gb: number): ModelRecord {
  return {
    model_id: id as ModelId,
    file: "m.gguf",
    bytes: gb * G,
    architecture: "llama",
    layers: 10,
    context_length: 4096,
    embedding_length: 4096,
    head_count: 32,
    head_count_kv: 8,
    supports_tensor: false,
  };
}

interface Placed {
  readonly id: string;
  readonly node: string;
  readonly gb: number;
  /** on_demand (default) or an operator's placement. */
  readonly pinned?: boolean;
}

/** Nodes of `totalGb` each (reported free: total minus what is placed); `placed` on them. */
function world(nodes: Record<string, number>, placed: Placed[]) {
  const state: ControlState = emptyState();
  for (const n of Object.keys(nodes))
    state.members[`n-${n}`] = {
      node_id: `n-${n}` as NodeId,
      peer_key: `p-${n}`,
      name: `node-${n}`,
      api_url: "",
      host: "",
      started_at: 0,
      joined_at: 0,
    };
  for (const p of placed) {
    const m = modelOf(`org/${p.id}`, p.gb);
    state.models[m.model_id] = m;
    state.instances[p.id] = {
      instance_id: p.id as InstanceId,
      model_id: m.model_id,
      sharding: "Pipeline",
      created_at: 0,
      assignments: [
        {
          node_id: `n-${p.node}` as NodeId,
          peer_key: `p-${p.node}`,
          rank: 0,
          layers: 10,
          weight_bytes: p.gb * G,
          required_bytes: p.gb * G,
        },
      ],
    };
    const d: Deployment = {
      deployment_id: `d-${p.id}`,
      model_id: m.model_id,
      min_nodes: 1,
      sharding: "Pipeline",
      excluded_peer_keys: [],
      created_at: 0,
      instance_id: p.id as InstanceId,
      status: "Placed",
      ...(p.pinned ? {} : { on_demand: true as const }),
    };
    state.deployments[d.deployment_id] = d;
  }
  const used = (n: string) => placed.filter((p) => p.node === n).reduce((s, p) => s + p.gb * G, 0);
  const reports: NodeReport[] = Object.entries(nodes).map(([n, total]) => ({
    peer_key: `p-${n}`,
    telemetry: {
      memory_total_bytes: total * G,
      memory_free_bytes: total * G - used(n),
      gpus: [],
      disk_free_bytes: null,
      engine: {
        server_bin: "/bin/llama-server",
        rpc_bin: null,
        backend: "cpu",
        usable: true,
        overridden: false,
      },
      declared_backend: "auto",
    },
    health: [],
    links: Object.keys(nodes)
      .filter((o) => o !== n)
      .map((o) => ({ peer_key: `p-${o}`, rtt_ms: 1 })),
  }));
  return { state, reports };
}

interface Case {
  readonly name: string;
  readonly nodes: Record<string, number>;
  readonly placed: Placed[];
  /** Per instance: requests in flight and last use (ms). */
  readonly use: Record<string, InstanceUse>;
  readonly loadGb: number;
  /** The instances unloaded, in order, and the node it lands on; or the refusal's words. */
  readonly want: { unload: string[]; on: string } | { refused: RegExp; busy?: number };
}

const cases: Case[] = [
  {
    name: "fits as it is: nothing unloaded",
    nodes: { a: 10 },
    placed: [{ id: "x", node: "a", gb: 3 }],
    use: {},
    loadGb: 6,
    want: { unload: [], on: "n-a" },
  },
  {
    name: "the least recently used idle instance goes first",
    nodes: { a: 10 },
    placed: [
      { id: "x", node: "a", gb: 4 },
      { id: "y", node: "a", gb: 4 },
    ],
    use: { x: { open: 0, lastUsedAt: 200 }, y: { open: 0, lastUsedAt: 100 } },
    loadGb: 5,
    want: { unload: ["y"], on: "n-a" },
  },
  {
    name: "never seen used counts as oldest",
    nodes: { a: 10 },
    placed: [
      { id: "x", node: "a", gb: 4 },
      { id: "y", node: "a", gb: 4 },
    ],
    use: { y: { open: 0, lastUsedAt: 100 } },
    loadGb: 5,
    want: { unload: ["x"], on: "n-a" },
  },
  {
    name: "as many as it takes, oldest first",
    nodes: { a: 10 },
    placed: [
      { id: "x", node: "a", gb: 4 },
      { id: "y", node: "a", gb: 4 },
    ],
    use: { x: { open: 0, lastUsedAt: 1 }, y: { open: 0, lastUsedAt: 2 } },
    loadGb: 9,
    want: { unload: ["x", "y"], on: "n-a" },
  },
  {
    name: "one with requests in flight stays, even when it is the oldest",
    nodes: { a: 10 },
    placed: [
      { id: "x", node: "a", gb: 4 },
      { id: "y", node: "a", gb: 4 },
    ],
    use: { x: { open: 2, lastUsedAt: 1 }, y: { open: 0, lastUsedAt: 500 } },
    loadGb: 5,
    want: { unload: ["y"], on: "n-a" },
  },
  {
    name: "an operator's placement stays, even when it is the oldest",
    nodes: { a: 10 },
    placed: [
      { id: "x", node: "a", gb: 4, pinned: true },
      { id: "y", node: "a", gb: 4 },
    ],
    use: { x: { open: 0, lastUsedAt: 1 }, y: { open: 0, lastUsedAt: 500 } },
    loadGb: 5,
    want: { unload: ["y"], on: "n-a" },
  },
  {
    name: "an unload on a node the load does not land on is not made",
    nodes: { a: 10, b: 10 },
    placed: [
      { id: "x", node: "a", gb: 8 },
      { id: "y", node: "b", gb: 8 },
    ],
    use: { x: { open: 0, lastUsedAt: 1 }, y: { open: 0, lastUsedAt: 2 } },
    loadGb: 7,
    // x (oldest) alone makes room on a: one unload, on a.
    want: { unload: ["x"], on: "n-a" },
  },
  {
    name: "only what the landing node needed goes, when the oldest freed the wrong node",
    nodes: { a: 10, b: 6 },
    placed: [
      { id: "x", node: "b", gb: 5 },
      { id: "y", node: "a", gb: 8 },
    ],
    use: { x: { open: 0, lastUsedAt: 1 }, y: { open: 0, lastUsedAt: 2 } },
    loadGb: 7,
    // x freed b (too small for 7), y freed a: only y goes.
    want: { unload: ["y"], on: "n-a" },
  },
  {
    name: "all in use: refused, saying so",
    nodes: { a: 10 },
    placed: [{ id: "x", node: "a", gb: 8 }],
    use: { x: { open: 1, lastUsedAt: 1 } },
    loadGb: 5,
    want: {
      refused: /room frees once the requests in flight on 1 on-demand instance\(s\) end/,
      busy: 1,
    },
  },
  {
    name: "in use, and too large even if it were not: refused, not to be waited for",
    nodes: { a: 10 },
    placed: [{ id: "x", node: "a", gb: 8 }],
    use: { x: { open: 1, lastUsedAt: 1 } },
    loadGb: 11,
    want: { refused: /no idle on-demand instance to unload \(1 with requests in flight/ },
  },
  {
    name: "too large even with everything unloaded: refused, saying so",
    nodes: { a: 10 },
    placed: [{ id: "x", node: "a", gb: 4 }],
    use: {},
    loadGb: 12,
    want: { refused: /unloading every idle on-demand instance \(1\) would not make room/ },
  },
];

describe("planLoad: room for an on-demand load", () => {
  for (const c of cases)
    it(c.name, () => {
      const { state, reports } = world(c.nodes, c.placed);
      const model = modelOf("org/new", c.loadGb);
      state.models[model.model_id] = model;
      const r = planLoad(
        state,
        reports,
        { model, minNodes: 1, sharding: "Pipeline", memory: BARE },
        (id) => c.use[id],
      );
      if ("refused" in c.want) {
        expect(r.ok).toBe(false);
        if (r.ok) return;
        expect(r.code).toBe("insufficient_memory");
        expect(r.message).toMatch(c.want.refused);
        expect(r.busy).toBe(c.want.busy);
        return;
      }
      if (!r.ok) throw new Error(`refused: ${r.message}`);
      expect(r.unload.map((u) => u.instance_id)).toEqual(c.want.unload);
      expect(r.placement.shares.map((s) => s.node_id)).toEqual([c.want.on]);
    });

  it("lists candidates least recently used first, with where they are and what they hold", () => {
    const { state } = world({ a: 20 }, [
      { id: "x", node: "a", gb: 4 },
      { id: "y", node: "a", gb: 3 },
      { id: "z", node: "a", gb: 2, pinned: true },
    ]);
    const got = unloadCandidates(state, (id) =>
      id === "x" ? { open: 0, lastUsedAt: 9 } : { open: 0, lastUsedAt: 3 },
    );
    expect(got).toEqual([
      {
        instance_id: "y",
        model_id: "org/y",
        deployment_id: "d-y",
        node_ids: ["n-a"],
        required_bytes: 3 * G,
        last_used_at: 3,
      },
      {
        instance_id: "x",
        model_id: "org/x",
        deployment_id: "d-x",
        node_ids: ["n-a"],
        required_bytes: 4 * G,
        last_used_at: 9,
      },
    ]);
  });
});
