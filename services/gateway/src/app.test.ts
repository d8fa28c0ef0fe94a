import { describe, expect, it } from "vitest";
import { emptyState } from "@ic/protocol";
import type {
  Command,
  ControlState,
  Heartbeat,
  InstanceId,
  ModelId,
  ModelRecord,
  NodeId,
  Runner,
  SessionId,
  Telemetry,
} from "@ic/protocol";
import { nodeIdFor } from "@ic/state";
import { silentLogger } from "@ic/log";
import { createGatewayApp } from "./app.ts";
import type { ClusterView, PeerView } from "@ic/protocol";

const S = "s-test" as SessionId;
const G = 1e9;
const model: ModelRecord = {
  model_id: "org/big" as ModelId,
  file: "big.gguf",
  bytes: 30 * G,
  architecture: "llama",
  layers: 40,
  context_length: 4096,
  embedding_length: 4096,
  head_count: 32,
  head_count_kv: 8,
  supports_tensor: true,
};

/**
 * What the engine probe of this llama.cpp build finds (`-sm row` cannot split over rpc, the
 * experimental `-sm tensor` can), on nodes whose operator allowed that mode.
 */
const PROBED = {
  row_over_rpc: false,
  tensor_over_rpc: true,
  tensor_opt_in: true,
  evidence: "row: device RPC0 does not support split buffers; tensor: served over two rpc devices",
};
/** The same build as shipped: the experimental mode not allowed. */
const NO_SPLIT = { ...PROBED, tensor_opt_in: false };

/** A GPU node (memory: its VRAM) with the probed engine, unless told otherwise. */
function telemetry(freeGb: number, split = PROBED): Telemetry {
  return {
    memory_total_bytes: 128 * G,
    memory_free_bytes: freeGb * G,
    gpus: [
      {
        vendor: "nvidia",
        model: "H200",
        vram_total_bytes: 128 * G,
        vram_free_bytes: freeGb * G,
      },
    ],
    disk_free_bytes: 100 * G,
    engine: {
      server_bin: "/e",
      rpc_bin: "/r",
      backend: "cuda",
      usable: true,
      overridden: false,
      split,
    },
    declared_backend: "auto",
  };
}

/** A scripted cluster view: nodes with given free memory, fully linked; records the commands it gets. */
function fakeCluster(
  nodes: { name: string; freeGb: number | null }[],
  opts: { synced?: boolean; split?: typeof PROBED } = {},
) {
  const state: ControlState = emptyState();
  state.session = {
    session_id: S,
    master_node_id: nodeIdFor(S, "p-0"),
    master_peer_key: "p-0",
    master_started_at: 0,
    started_at: 0,
  };
  state.models[model.model_id] = model;
  const peers: PeerView[] = nodes.map((n, i) => {
    const peer = `p-${i}`;
    const id = nodeIdFor(S, peer);
    state.members[id] = {
      node_id: id,
      peer_key: peer,
      name: n.name,
      api_url: "",
      host: "",
      started_at: i,
      joined_at: 0,
    };
    const hb: Heartbeat = {
      peer_key: peer,
      name: n.name,
      host: "",
      api_url: "",
      started_at: i,
      session_id: S,
      master_peer_key: "p-0",
      is_master: i === 0,
      last_index: 0,
      telemetry: n.freeGb === null ? null : telemetry(n.freeGb, opts.split),
      links: nodes
        .map((_, j) => ({ peer_key: `p-${j}`, rtt_ms: 0.5 }))
        .filter((l) => l.peer_key !== peer),
      runners: [],
      health: [],
      sent_at: 0,
    };
    return { heartbeat: hb, lastHeard: 0 };
  });
  const commands: Command[] = [];
  const view: ClusterView = {
    peerKey: "p-0",
    synced: opts.synced ?? true,
    isMaster: true,
    sessionId: S,
    nodeId: nodeIdFor(S, "p-0"),
    snapshot: () => state,
    livePeers: () => peers,
    command: async (cmd) => {
      commands.push(cmd);
      return { ok: true, index: commands.length };
    },
    on: () => () => {},
  };
  const idOf = (name: string) =>
    Object.values(state.members).find((m) => m.name === name)!.node_id as NodeId;
  return { view, commands, idOf };
}

function app(view: ClusterView, infoPendingWaitMs = 300) {
  return createGatewayApp({ cluster: view, log: silentLogger(), name: "test", infoPendingWaitMs });
}

async function post(a: ReturnType<typeof app>, path: string, body: unknown) {
  const r = await a.request(path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return {
    status: r.status,
    body: (await r.json()) as {
      ok?: boolean;
      instance?: { assignments: { node_id: string; layers?: number }[] };
      error?: { code: string; message: string; retryable: boolean };
    },
  };
}

describe("POST /place_instance", () => {
  it("accepts synchronously with rank-ordered assignments and sends one PlaceInstance command", async () => {
    const c = fakeCluster([
      { name: "a", freeGb: 64 },
      { name: "b", freeGb: 32 },
    ]);
    const r = await post(app(c.view), "/place_instance", {
      model_id: "org/big",
      min_nodes: 2,
      excluded_nodes: [],
    });
    expect(r.status).toBe(200);
    expect(r.body.instance!.assignments.map((x) => x.layers)).toEqual([27, 13]);
    expect(c.commands.map((x) => x.type)).toEqual(["PlaceInstance"]);
  });

  it("max_replicas places min_replicas of a set that follows load; bad bounds are refused", async () => {
    const c = fakeCluster([
      { name: "a", freeGb: 64 },
      { name: "b", freeGb: 64 },
    ]);
    const a = app(c.view);
    const r = await post(a, "/place_instance", {
      model_id: "org/big",
      min_replicas: 1,
      max_replicas: 3,
      keep_alive: "10m",
    });
    expect(r.status).toBe(200);
    expect(c.commands).toMatchObject([
      {
        type: "PlaceInstance",
        deployment: {
          replica_set: expect.stringMatching(/^rs-/),
          scale: { min_replicas: 1, max_replicas: 3, up_at: 4 },
          keep_alive_ms: 600_000,
        },
      },
    ]);
    const bad = await post(a, "/place_instance", {
      model_id: "org/big",
      min_replicas: 3,
      max_replicas: 2,
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error!.message).toContain("min_replicas (3) exceeds max_replicas (2)");
    const alone = await post(a, "/place_instance", { model_id: "org/big", scale_up_at: 2 });
    expect(alone.body.error!.message).toContain("need max_replicas");
    expect(c.commands).toHaveLength(1);
  });

  it("400 insufficient_memory names the node and gives the GB arithmetic; nothing reaches the master", async () => {
    const c = fakeCluster([
      { name: "small", freeGb: 10 },
      { name: "big", freeGb: 100 },
    ]);
    const r = await post(app(c.view), "/place_instance", {
      model_id: "org/big",
      min_nodes: 2,
      sharding: "Tensor",
    });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: "insufficient_memory", retryable: false });
    expect(r.body.error!.message).toMatch(
      /node small \(n-[0-9a-f]+\) cannot fit its share .* needs \d+\.\d\d GB .* but has 10\.00 GB free/,
    );
    expect(c.commands).toEqual([]);
  });

  it("400 all_excluded when the exclusions remove every candidate; stale ids are ignored", async () => {
    const c = fakeCluster([{ name: "a", freeGb: 64 }]);
    const a = app(c.view);
    expect(
      (await post(a, "/place_instance", { model_id: "org/big", excluded_nodes: [c.idOf("a")] }))
        .body.error!.code,
    ).toBe("all_excluded");
    expect(
      (
        await post(a, "/place_instance", {
          model_id: "org/big",
          excluded_nodes: ["n-0000000000aa"],
        })
      ).status,
    ).toBe(200);
  });

  it("excluded_nodes takes names too; an unknown name is a 400 listing the nodes, and nothing is placed", async () => {
    const c = fakeCluster([
      { name: "a", freeGb: 64 },
      { name: "b", freeGb: 64 },
    ]);
    const a = app(c.view);
    const r = await post(a, "/place_instance", { model_id: "org/big", excluded_nodes: ["a"] });
    expect(r.status).toBe(200);
    const placed = c.commands[0] as Extract<Command, { type: "PlaceInstance" }>;
    expect(placed.instance.assignments.map((x) => x.node_id)).toEqual([c.idOf("b")]);
    expect(placed.deployment?.excluded_nodes).toEqual([c.idOf("a")]);
    const bad = await post(a, "/place_instance", {
      model_id: "org/big",
      excluded_nodes: ["bogus"],
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error!.code).toBe("invalid_request");
    expect(bad.body.error!.message).toBe(
      `excluded_nodes: no node is named bogus; the nodes are a (${c.idOf("a")}), b (${c.idOf("b")})`,
    );
    expect(c.commands).toHaveLength(1);
  });

  it("400 no_cycle and tensor_unsupported", async () => {
    const c = fakeCluster([{ name: "a", freeGb: 64 }]);
    expect(
      (await post(app(c.view), "/place_instance", { model_id: "org/big", min_nodes: 3 })).body
        .error!.code,
    ).toBe("no_cycle");
    const d = fakeCluster([
      { name: "a", freeGb: 64 },
      { name: "b", freeGb: 64 },
      { name: "c", freeGb: 64 },
    ]);
    expect(
      (
        await post(app(d.view), "/place_instance", {
          model_id: "org/big",
          min_nodes: 3,
          sharding: "Tensor",
        })
      ).body.error!.code,
    ).toBe("tensor_unsupported");
  });

  it("503 info_pending after waiting when a node's memory was not gossiped yet (never a false insufficient_memory)", async () => {
    const c = fakeCluster([
      { name: "a", freeGb: null },
      { name: "b", freeGb: 1 },
    ]);
    const t0 = Date.now();
    const r = await post(app(c.view, 300), "/place_instance", { model_id: "org/big" });
    expect(r.status).toBe(503);
    expect(r.body.error).toMatchObject({ code: "info_pending", retryable: true });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(280);
  });

  it("validates the body: unknown fields, bad model ids and non-JSON are 400 invalid_request", async () => {
    const c = fakeCluster([{ name: "a", freeGb: 64 }]);
    const a = app(c.view);
    for (const bad of [
      { model_id: "org/big", surprise: 1 },
      { model_id: "../../etc/passwd" },
      { model_id: "org/big", min_nodes: 0 },
      "{not json",
    ]) {
      const r = await post(a, "/place_instance", bad);
      expect(r.status).toBe(400);
      expect(r.body.error!.code).toBe("invalid_request");
    }
    expect((await post(a, "/place_instance", { model_id: "org/unknown" })).status).toBe(404);
  });
});

describe("GET /instance/previews and DELETE /instance", () => {
  it("lists every sharding x node count with placement or reason, honoring excluded_node_ids", async () => {
    const c = fakeCluster([
      { name: "a", freeGb: 64 },
      { name: "b", freeGb: 20 },
    ]);
    const r = await app(c.view).request(
      `/instance/previews?model_id=org/big&excluded_node_ids=${c.idOf("a")}`,
    );
    const body = (await r.json()) as {
      previews: { sharding: string; nodes: number; ok: boolean; error?: { code: string } }[];
    };
    expect(
      body.previews.map((p) => `${p.sharding}/${p.nodes}:${p.ok ? "ok" : p.error!.code}`),
    ).toEqual([
      "Pipeline/1:insufficient_memory",
      "Pipeline/2:all_excluded",
      "Tensor/1:insufficient_memory",
      "Tensor/2:all_excluded",
    ]);
    // The same by name; an unknown name is refused, never silently ignored.
    const byName = await app(c.view).request(
      `/instance/previews?model_id=org/big&excluded_node_ids=a`,
    );
    expect(((await byName.json()) as { excluded_node_ids: string[] }).excluded_node_ids).toEqual([
      c.idOf("a"),
    ]);
    const bogus = await app(c.view).request(
      `/instance/previews?model_id=org/big&excluded_node_ids=a,bogus`,
    );
    expect(bogus.status).toBe(400);
    expect(((await bogus.json()) as { error: { message: string } }).error.message).toContain(
      "excluded_node_ids: no node is named bogus",
    );
  });
  it("Tensor across nodes with an engine that cannot split over rpc: 400 tensor_unsupported at the API and in previews, naming the engine's words; nothing reaches the master", async () => {
    const c = fakeCluster(
      [
        { name: "a", freeGb: 64 },
        { name: "b", freeGb: 64 },
      ],
      { split: NO_SPLIT },
    );
    const r = await post(app(c.view), "/place_instance", {
      model_id: "org/big",
      min_nodes: 2,
      sharding: "Tensor",
    });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatchObject({ code: "tensor_unsupported", retryable: false });
    expect(r.body.error!.message).toMatch(
      /engine of node a \(n-[0-9a-f]+\) does not \(row: device RPC0 does not support split buffers.*use Pipeline sharding for min_nodes > 1/,
    );
    expect(c.commands).toEqual([]);
    const p = await app(c.view).request("/instance/previews?model_id=org/big");
    const body = (await p.json()) as {
      previews: { sharding: string; nodes: number; ok: boolean; error?: { code: string } }[];
    };
    expect(
      body.previews.map((x) => `${x.sharding}/${x.nodes}:${x.ok ? "ok" : x.error!.code}`),
    ).toEqual(["Pipeline/1:ok", "Pipeline/2:ok", "Tensor/1:ok", "Tensor/2:tensor_unsupported"]);
    // One node alone may use Tensor (its local GPUs), and an engine that can split places it.
    expect(
      (await post(app(c.view), "/place_instance", { model_id: "org/big", sharding: "Tensor" }))
        .status,
    ).toBe(200);
    const capable = fakeCluster([
      { name: "a", freeGb: 64 },
      { name: "b", freeGb: 64 },
    ]);
    expect(
      (
        await post(app(capable.view), "/place_instance", {
          model_id: "org/big",
          min_nodes: 2,
          sharding: "Tensor",
        })
      ).status,
    ).toBe(200);
  });

  it("DELETE sends DeleteInstance", async () => {
    const c = fakeCluster([{ name: "a", freeGb: 64 }]);
    const r = await app(c.view).request("/instance/i-123", { method: "DELETE" });
    expect(r.status).toBe(200);
    expect(c.commands).toEqual([{ type: "DeleteInstance", instance_id: "i-123" }]);
  });
});

describe("GET /state and errors", () => {
  it("reports node_identities and nodeHealth as the spec names them", async () => {
    const c = fakeCluster([
      { name: "a", freeGb: 64 },
      { name: "b", freeGb: 20 },
    ]);
    const doc = (await (await app(c.view).request("/state")).json()) as {
      node_identities: unknown[];
      nodeHealth: unknown[];
      topology: { links: unknown[] };
    };
    expect(doc.node_identities).toHaveLength(2);
    expect(doc.nodeHealth).toEqual([]);
    // One measurement per direction: each node reports the peers it reaches.
    expect(doc.topology.links).toHaveLength(2);
  });
  it("?links=0 leaves the links out and keeps the rest; another value is a 400", async () => {
    const c = fakeCluster([
      { name: "a", freeGb: 64 },
      { name: "b", freeGb: 20 },
    ]);
    const r = await app(c.view).request("/state?links=0");
    const doc = (await r.json()) as { node_identities: unknown[]; topology: { links: unknown[] } };
    expect(doc.topology.links).toEqual([]);
    expect(doc.node_identities).toHaveLength(2);
    const bad = await app(c.view).request("/state?links=no");
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe("invalid_request");
  });
  it("unknown routes get the typed 404 envelope", async () => {
    const c = fakeCluster([{ name: "a", freeGb: 64 }]);
    const r = await app(c.view).request("/nope");
    expect(r.status).toBe(404);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe("not_found");
  });
  it("chat for a model without an instance is a 404 model_not_found in the OpenAI error shape", async () => {
    const c = fakeCluster([{ name: "a", freeGb: 64 }]);
    const r = await post(app(c.view), "/v1/chat/completions", {
      model: "org/big",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 2,
    });
    expect(r.status).toBe(404);
    expect(r.body.error).toMatchObject({ code: "model_not_found", type: "not_found_error" });
  });
});

describe("readiness over HTTP", () => {
  /** One instance of org/big on node "a" whose rank 0 is staging (40% after 8 s). */
  function staging() {
    const c = fakeCluster([{ name: "a", freeGb: 64 }]);
    const s = c.view.snapshot();
    const now = Date.now();
    s.instances["i-w"] = {
      instance_id: "i-w" as InstanceId,
      model_id: model.model_id,
      sharding: "Pipeline",
      created_at: 1,
      assignments: [
        { node_id: c.idOf("a"), peer_key: "p-0", rank: 0, weight_bytes: 1, required_bytes: 1 },
      ],
    };
    s.runners["i-w/0"] = {
      instance_id: "i-w" as InstanceId,
      node_id: c.idOf("a"),
      rank: 0,
      state: "RunnerStaging",
      restarts: 0,
      since: now,
      progress: { staged_bytes: 12 * G, total_bytes: 30 * G, started_at: now - 8000 },
    };
    return c;
  }

  it("chat for a model whose instance is staging is a retryable 404 with Retry-After", async () => {
    const r = await app(staging().view).request("/v1/chat/completions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "org/big", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(r.status).toBe(404);
    expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(12);
    const body = (await r.json()) as { error: Record<string, unknown> };
    expect(body.error).toMatchObject({
      code: "model_not_ready",
      type: "not_found_error",
      retryable: true,
      message: "org/big is staging on a (40% of 30.0 GB); retry",
    });
  });

  it("/v1/models leaves the model out until it is ready; /state shows the staging progress", async () => {
    const c = staging();
    const a = app(c.view);
    const models = (await (await a.request("/v1/models")).json()) as { data: unknown[] };
    expect(models.data).toEqual([]);
    const doc = (await (await a.request("/state")).json()) as {
      instances: { runners: Runner[] }[];
    };
    expect(doc.instances[0]?.runners[0]?.progress).toMatchObject({
      staged_bytes: 12 * G,
      total_bytes: 30 * G,
    });
    c.view.snapshot().runners["i-w/0"] = {
      ...c.view.snapshot().runners["i-w/0"]!,
      state: "RunnerReady",
      endpoint: "http://127.0.0.1:1",
    };
    const after = (await (await a.request("/v1/models")).json()) as { data: { id: string }[] };
    expect(after.data.map((m) => m.id)).toEqual(["org/big"]);
  });
});

describe("GET /state/stream", () => {
  /** Reads SSE events from a response body, one `{event, data}` at a time. */
  function events(body: ReadableStream<Uint8Array>) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    return {
      async next(): Promise<{ event: string; data: string }> {
        for (;;) {
          const end = buffer.indexOf("\n\n");
          if (end >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const lines = block.split("\n");
            const event =
              lines
                .find((l) => l.startsWith("event:"))
                ?.slice(6)
                .trim() ?? "";
            const data = lines
              .filter((l) => l.startsWith("data:"))
              .map((l) => l.slice(5).trimStart())
              .join("\n");
            return { event, data };
          }
          const { value, done } = await reader.read();
          if (done) throw new Error("stream ended");
          buffer += decoder.decode(value, { stream: true });
        }
      },
      cancel: () => reader.cancel(),
    };
  }

  it("sends the state at once, again on each replica change, and unsubscribes when closed", async () => {
    const c = fakeCluster([{ name: "a", freeGb: 64 }]);
    const listeners = new Set<() => void>();
    const view: ClusterView = {
      ...c.view,
      on: (l) => {
        const f = () => l.event?.({} as never, c.view.snapshot());
        listeners.add(f);
        return () => listeners.delete(f);
      },
    };
    const a = createGatewayApp({
      cluster: view,
      log: silentLogger(),
      name: "test",
      stateStreamPeriodMs: 60_000,
    });
    const r = await a.request("/state/stream?links=0");
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const s = events(r.body!);
    const first = await s.next();
    expect(first.event).toBe("state");
    const doc = JSON.parse(first.data) as { index: number; topology: { links: unknown[] } };
    expect(doc.topology.links).toEqual([]);
    expect(listeners.size).toBe(1);
    // A change of the replica: the next document follows without waiting for the 60 s period.
    c.view.snapshot().index = 7;
    const t0 = Date.now();
    for (const l of listeners) l();
    const second = JSON.parse((await s.next()).data) as { index: number };
    expect(second.index).toBe(7);
    expect(Date.now() - t0).toBeLessThan(10_000);
    await s.cancel();
    await expect.poll(() => listeners.size).toBe(0);
  });

  it("answers a bad query with 400", async () => {
    const r = await app(fakeCluster([{ name: "a", freeGb: 1 }]).view).request(
      "/state/stream?links=2",
    );
    expect(r.status).toBe(400);
  });
});

describe("POST /admin/drain", () => {
  it("answers 202 and then asks the node to drain (once the answer is out)", async () => {
    const c = fakeCluster([{ name: "a", freeGb: 64 }]);
    let drained = 0;
    const a = createGatewayApp({
      cluster: c.view,
      log: silentLogger(),
      name: "node-a",
      drain: () => void drained++,
    });
    const r = await a.request("/admin/drain", { method: "POST" });
    expect(r.status).toBe(202);
    expect(await r.json()).toEqual({ ok: true, draining: true, node: "node-a" });
    expect(drained).toBe(0);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(drained).toBe(1);
  });
});
