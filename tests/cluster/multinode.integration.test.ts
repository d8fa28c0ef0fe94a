import { mkdtempSync, readFileSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import {
  argAfter,
  placeAndWait,
  processesOf,
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { HostCluster, NodeProcess } from "@ic/testkit";

interface StateDoc {
  node_identities: { node_id: string; name: string; is_master: boolean }[];
  instances: {
    instance_id: string;
    model_id: string;
    assignments: { node_id: string; rank: number }[];
    runners: { rank: number; state: string; endpoint?: string }[];
  }[];
}

const idOf = (doc: Pick<StateDoc, "node_identities">, name: string) =>
  doc.node_identities.find((n) => n.name === name)!.node_id;

const nameOf = (doc: Pick<StateDoc, "node_identities">, nodeId: string) =>
  doc.node_identities.find((n) => n.node_id === nodeId)?.name;

/** An OpenAI client for the node's API, with the cluster's bearer token as its API key. */
function openai(node: NodeProcess, opts: { maxRetries?: number } = {}) {
  return new OpenAI({ baseURL: `${node.apiUrl}/v1`, apiKey: node.spec.apiToken!, ...opts });
}

/**
 * Asserts that every ready runner of the instance advertises the host of the node it runs on
 * (`https://node-k:port` for rank 0's llama-server (TLS), `node-k:port` for a ggml-rpc-server), never
 * loopback; returns the advertised endpoints by rank.
 */
function expectHostEndpoints(doc: StateDoc, instanceId: string): Map<number, string> {
  const inst = doc.instances.find((i) => i.instance_id === instanceId)!;
  const out = new Map<number, string>();
  for (const a of inst.assignments) {
    const host = nameOf(doc, a.node_id);
    expect(host).toMatch(/^node-\d+$/);
    const ep = inst.runners.find((r) => r.rank === a.rank)?.endpoint;
    expect(ep).toMatch(new RegExp(`^${a.rank === 0 ? "https://" : ""}${host}:\\d+$`));
    out.set(a.rank, ep!);
  }
  return out;
}

async function openStream(node: NodeProcess, model: string, maxTokens: number) {
  const client = openai(node, { maxRetries: 0 });
  return client.chat.completions.create({
    model,
    messages: [{ role: "user", content: "Write a long story" }],
    max_tokens: maxTokens,
    stream: true,
  });
}

/** Reads a stream until it ends or errors; resolves with what happened and when. */
async function drain(
  stream: AsyncIterable<unknown>,
): Promise<{ chunks: number; error?: unknown; endedAt: number }> {
  let chunks = 0;
  try {
    for await (const _ of stream) chunks++;
    return { chunks, endedAt: Date.now() };
  } catch (error) {
    return { chunks, error, endedAt: Date.now() };
  }
}

/** Places the model on node-3 only (excluding the others by node id); waits until `observer` sees it ready. */
async function placeOnNode3(
  via: NodeProcess,
  observer: NodeProcess,
  modelId: string,
  doc: Pick<StateDoc, "node_identities">,
) {
  const inst = await placeAndWait(via, {
    model_id: modelId,
    min_nodes: 1,
    excluded_nodes: [idOf(doc, "node-1"), idOf(doc, "node-2")],
  });
  await waitFor(
    async () =>
      (await observer.get<StateDoc>("/state")).instances[0]?.runners.some(
        (r) => r.state === "RunnerReady",
      )
        ? true
        : undefined,
    { timeoutMs: 10_000, what: "instance ready on the observer" },
  );
  return inst;
}

/** `observer`'s /state once every rank of the instance is ready there. */
async function readyState(observer: NodeProcess, instanceId: string): Promise<StateDoc> {
  return waitFor(
    async () => {
      const s = await observer.get<StateDoc>("/state");
      const inst = s.instances.find((i) => i.instance_id === instanceId);
      return inst?.runners.every((r) => r.state === "RunnerReady") &&
        inst.runners.length === inst.assignments.length
        ? s
        : undefined;
    },
    { timeoutMs: 10_000, what: `instance ${instanceId} ready on ${observer.spec.name}` },
  );
}

/**
 * Engine processes of this cluster with the address each listens on: llama-servers loading from
 * one of its nodes' staging dirs (`--host`), and ggml-rpc-servers listening (`-H`) on one of its
 * lab hosts' addresses (other tests on the machine may run their own).
 */
function engineProcesses(cluster: HostCluster): { pid: number; listen?: string }[] {
  const addresses = new Set(cluster.lab.hosts.map((h) => h.address));
  const rpc = processesOf("ggml-rpc-server").flatMap(({ pid, argv }) => {
    const h = argAfter(argv, "-H");
    return h !== undefined && addresses.has(h) ? [{ pid, listen: h }] : [];
  });
  const servers = processesOf("llama-server").flatMap(({ pid, argv }) => {
    if (!cluster.nodes.some((n) => argv.some((a) => a.includes(join(n.dataDir, "staging")))))
      return [];
    const h = argAfter(argv, "--host");
    return [{ pid, ...(h !== undefined ? { listen: h } : {}) }];
  });
  return [...rpc, ...servers];
}

function seeded(slow = false) {
  return seedStore(mkdtempSync(join(tmpdir(), "ic-store-")), { slow });
}

describe("chat across a 3-node cluster", () => {
  it("serves streaming and non-streaming through every node, and a lost worker ends an open stream with an error event within 6 s", async () => {
    const { store, modelId } = await seeded(true);
    // A wider model on one thread keeps the stream open long enough to kill its worker mid-generation.
    await using cluster = await startHostCluster(3, {
      config: (i) => ({
        ...(i === 0 ? { store_path: store } : {}),
        engine: { context_size: 2048, extra_args: ["-t", "1"] },
      }),
    });
    const [n1, n2, n3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    const docs = await waitForConvergence(cluster.nodes, 3);
    const placed = await placeOnNode3(n1, n2, modelId, docs[0]!);
    // Every node routes to the engine on node-3's host, named as deployed.
    for (const node of cluster.nodes) {
      const eps = expectHostEndpoints(
        await readyState(node, placed.instance_id),
        placed.instance_id,
      );
      expect(eps.get(0)).toMatch(/^https:\/\/node-3:\d+$/);
    }
    // node-3 staged its copy from the store host on node-1, across hosts.
    const staged = await n3.get<{ staged_models: { model_id: string; in_use: boolean }[] }>(
      "/store/storage",
    );
    expect(staged.staged_models).toContainEqual(
      expect.objectContaining({ model_id: modelId, in_use: true }),
    );
    for (const node of cluster.nodes) {
      const client = openai(node);
      const r = await client.chat.completions.create({
        model: modelId,
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 4,
      });
      expect(r.usage?.completion_tokens).toBe(4);
      const s = await drain(await openStream(node, modelId, 6));
      expect(s.error).toBeUndefined();
      expect(s.chunks).toBeGreaterThan(2);
    }
    // A long stream through node-2 while node-3 (the worker) dies.
    const stream = await openStream(n2, modelId, 1900);
    const reading = drain(stream);
    await new Promise((r) => setTimeout(r, 1000));
    const killedAt = Date.now();
    n3.kill("SIGKILL");
    const result = await reading;
    expect(result.error).toBeDefined();
    expect(String((result.error as Error).message)).toMatch(/lost|retry|broke/);
    expect(result.endedAt - killedAt).toBeLessThan(6000);
    // The instance is gone from the survivors' state and the model now answers 404.
    await waitFor(
      async () => ((await n1.get<StateDoc>("/state")).instances.length === 0 ? true : undefined),
      { timeoutMs: 6000 },
    );
    const r404 = await n1.post("/v1/chat/completions", {
      model: modelId,
      messages: [{ role: "user", content: "x" }],
      max_tokens: 2,
    });
    expect(r404.status).toBe(404);
  });

  it("a lost master fails an open stream on another node with session_changed, and instances on survivors survive", async () => {
    const { store, modelId } = await seeded(true);
    await using cluster = await startHostCluster(3, {
      config: (i) => ({
        ...(i === 0 ? { store_path: store } : {}),
        engine: { context_size: 2048, extra_args: ["-t", "1"] },
      }),
    });
    const [n1, n2, n3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    const docs = await waitForConvergence(cluster.nodes, 3);
    const inst = await placeOnNode3(n2, n2, modelId, docs[0]!);
    const stream = await openStream(n2, modelId, 1900);
    const reading = drain(stream);
    await new Promise((r) => setTimeout(r, 1000));
    const killedAt = Date.now();
    n1.kill("SIGKILL"); // node-1 is the master
    const result = await reading;
    expect(result.error).toBeDefined();
    expect(String((result.error as Error).message)).toMatch(/session changed/);
    expect(result.endedAt - killedAt).toBeLessThan(6000);
    const after = await waitForConvergence([n2, n3], 2, 10_000);
    expect(after[0]!.node_identities.find((n) => n.is_master)?.name).toBe("node-2");
    const s = await n2.get<StateDoc>("/state");
    expect(s.instances.map((i) => i.instance_id)).toEqual([inst.instance_id]);
    // The carried instance keeps its host-named endpoint in the new session, and keeps serving.
    const eps = expectHostEndpoints(await readyState(n2, inst.instance_id), inst.instance_id);
    expect(eps.get(0)).toMatch(/^https:\/\/node-3:\d+$/);
    const client = openai(n3);
    const r = await client.chat.completions.create({
      model: modelId,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 2,
    });
    expect(r.usage?.completion_tokens).toBe(2);
  });
});

describe("multi-node instances and staging", () => {
  it("a 2-node Pipeline instance runs over llama.cpp RPC, both devices hold layers, and deletion leaves no process", async () => {
    const { store, modelId } = await seeded();
    await using cluster = await startHostCluster(2, {
      config: (i) => (i === 0 ? { store_path: store } : {}),
    });
    const [n1, n2] = cluster.nodes as [NodeProcess, NodeProcess];
    await waitForConvergence(cluster.nodes, 2);
    const inst = await placeAndWait(
      n1,
      { model_id: modelId, min_nodes: 2, sharding: "Pipeline" },
      60_000,
    );
    expect(inst.assignments).toHaveLength(2);
    // Each rank runs on its own host and is advertised under that host's name.
    const doc = await readyState(n2, inst.instance_id);
    const eps = expectHostEndpoints(doc, inst.instance_id);
    const rank0Host = nameOf(doc, inst.assignments.find((a) => a.rank === 0)!.node_id)!;
    const rank1Host = nameOf(doc, inst.assignments.find((a) => a.rank === 1)!.node_id)!;
    expect(new Set([rank0Host, rank1Host])).toEqual(new Set(["node-1", "node-2"]));
    const client = openai(n2);
    const r = await client.chat.completions.create({
      model: modelId,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 8,
    });
    expect(r.usage?.completion_tokens).toBe(8);
    // The rank-0 log shows the model split between the local CPU and the remote RPC device.
    // The remote device is the ggml-rpc-server on the peer's host, dialled by name (not loopback).
    const rank0Node = cluster.node(rank0Host);
    expect(readdirSync(join(rank0Node.dataDir, "runners"))).toContain(
      `${inst.instance_id}-rank0.log`,
    );
    const log = readFileSync(
      join(rank0Node.dataDir, "runners", `${inst.instance_id}-rank0.log`),
      "utf8",
    );
    expect(log).toContain(`RPC0[${eps.get(1)!}] model buffer size`);
    expect(log).toMatch(new RegExp(`RPC0\\[${rank1Host}:\\d+\\] model buffer size`));
    expect(log).not.toMatch(/RPC0\[127\.0\.0\.1:/);
    expect(log).toMatch(/CPU_Mapped model buffer size/);
    // Each engine listens on its own host's address, not on loopback or every interface.
    expect(
      engineProcesses(cluster)
        .map((p) => p.listen)
        .sort(),
    ).toEqual([cluster.lab.host(rank0Host).address, cluster.lab.host(rank1Host).address].sort());
    // Staged copies exist on both nodes; the storage report marks them in use.
    const rank0Staged = await rank0Node.get<{ staged_models: { model_id: string }[] }>(
      "/store/storage",
    );
    expect(rank0Staged.staged_models.map((m) => m.model_id)).toContain(modelId);
    for (const node of cluster.nodes) {
      const rep = await node.get<{ staged_models: { model_id: string; in_use: boolean }[] }>(
        "/store/storage",
      );
      if (rep.staged_models.length > 0)
        expect(rep.staged_models[0]).toMatchObject({ model_id: modelId, in_use: true });
    }
    const del = await fetch(`${n2.apiUrl}/instance/${inst.instance_id}`, {
      method: "DELETE",
      headers: n2.authHeaders,
    });
    expect(del.status).toBe(200);
    await waitFor(
      async () => {
        const s = await n1.get<{ instances: unknown[] }>("/state");
        return s.instances.length === 0 ? true : undefined;
      },
      { timeoutMs: 10_000 },
    );
    // No engine process of this instance is left on any of the lab's hosts.
    await waitFor(() => (engineProcesses(cluster).length === 0 ? true : undefined), {
      timeoutMs: 10_000,
      what: "runner processes gone",
    });
    // Once the runners are gone the copies are idle on every node.
    for (const node of cluster.nodes) {
      await waitFor(
        async () => {
          const rep = await node.get<{ staged_models: { in_use: boolean }[] }>("/store/storage");
          return rep.staged_models.every((m) => !m.in_use) ? true : undefined;
        },
        { timeoutMs: 10_000, what: "staged copies idle" },
      );
    }
    // Purge broadcast: every node answers; the store copy stays.
    const purge = await n1.post("/store/purge-staging", {});
    const body = (await purge.json()) as {
      ok: boolean;
      nodes: { name: string; deleted: string[] }[];
      not_answered: string[];
    };
    expect(purge.status).toBe(200);
    expect(body.nodes.map((n) => n.name).sort()).toEqual(["node-1", "node-2"]);
    expect(body.not_answered).toEqual([]);
    expect(body.nodes.flatMap((n) => n.deleted)).toContain(modelId);
    expect(readdirSync(join(store, "test--tiny-llama"))).toContain("tiny-llama.gguf");
    const bad = await n1.post("/store/purge-staging", { modelId: "../../etc" });
    expect(bad.status).toBe(400);
  });
});

/** One sample of a Prometheus text exposition (0 when absent). */
async function metric(node: NodeProcess, line: RegExp): Promise<number> {
  const text = await (await fetch(`${node.apiUrl}/metrics`, { headers: node.authHeaders })).text();
  const m = text.split("\n").find((l) => line.test(l));
  return m ? Number(m.slice(m.lastIndexOf(" ") + 1)) : 0;
}

describe("staging from peers across hosts", () => {
  it("a node stages a model from another node's copy, verified against the store host's manifest", async () => {
    const { store, modelId } = await seeded();
    await using cluster = await startHostCluster(3, {
      config: (i) => (i === 0 ? { store_path: store } : {}),
    });
    const [n1, n2, n3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    const docs = await waitForConvergence(cluster.nodes, 3);
    // node-3 stages from the store host on node-1: nobody else holds the model yet.
    await placeOnNode3(n1, n2, modelId, docs[0]!);
    expect(await metric(n3, /^ic_staging_received_bytes_total\{.*source="store"/)).toBeGreaterThan(
      0,
    );
    expect(await metric(n3, /^ic_staging_received_bytes_total\{.*source="peers"/)).toBe(0);
    // A second instance on node-2 only: its copy comes from node-3's.
    const second = await placeAndWait(n1, {
      model_id: modelId,
      min_nodes: 1,
      excluded_nodes: [idOf(docs[0]!, "node-1"), idOf(docs[0]!, "node-3")],
    });
    await readyState(n2, second.instance_id);
    const fromPeers = await metric(n2, /^ic_staging_received_bytes_total\{.*source="peers"/);
    expect(fromPeers).toBeGreaterThan(0);
    expect(await metric(n2, /^ic_staging_received_bytes_total\{.*source="store"/)).toBe(0);
    expect(await metric(n3, /^ic_staging_served_to_peers_bytes_total/)).toBe(fromPeers);
    // The copy node-2 runs from answers chat: the bytes are the model's.
    const r = await openai(n2).chat.completions.create({
      model: modelId,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 2,
    });
    expect(r.usage?.completion_tokens).toBe(2);
  });
});
