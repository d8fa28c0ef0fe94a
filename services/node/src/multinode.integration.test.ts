import { mkdtempSync, readFileSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { placeAndWait, seedStore, startCluster, waitFor, waitForConvergence } from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

interface StateDoc {
  node_identities: { node_id: string; name: string; is_master: boolean }[];
  instances: {
    instance_id: string;
    model_id: string;
    assignments: { node_id: string; rank: number }[];
    runners: { rank: number; state: string }[];
  }[];
}

const idOf = (doc: Pick<StateDoc, "node_identities">, name: string) =>
  doc.node_identities.find((n) => n.name === name)!.node_id;

async function openStream(node: NodeProcess, model: string, maxTokens: number) {
  const client = new OpenAI({ baseURL: `${node.apiUrl}/v1`, apiKey: "unused", maxRetries: 0 });
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

function seeded(slow = false) {
  return seedStore(mkdtempSync(join(tmpdir(), "ic-store-")), { slow });
}

describe("chat across a 3-node cluster", () => {
  it("serves streaming and non-streaming through every node, and a lost worker ends an open stream with an error event within 6 s", async () => {
    const { store, modelId } = await seeded(true);
    // A wider model on one thread keeps the stream open long enough to kill its worker mid-generation.
    await using cluster = await startCluster(3, {
      config: (i) => ({
        ...(i === 0 ? { store_path: store } : {}),
        engine: { context_size: 2048, extra_args: ["-t", "1"] },
      }),
    });
    const [n1, n2, n3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    const docs = await waitForConvergence(cluster.nodes, 3);
    await placeOnNode3(n1, n2, modelId, docs[0]!);
    for (const node of cluster.nodes) {
      const client = new OpenAI({ baseURL: `${node.apiUrl}/v1`, apiKey: "unused" });
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
    await using cluster = await startCluster(3, {
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
    // The carried instance keeps serving in the new session.
    const client = new OpenAI({ baseURL: `${n3.apiUrl}/v1`, apiKey: "unused" });
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
    await using cluster = await startCluster(2, {
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
    const client = new OpenAI({ baseURL: `${n2.apiUrl}/v1`, apiKey: "unused" });
    const r = await client.chat.completions.create({
      model: modelId,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 8,
    });
    expect(r.usage?.completion_tokens).toBe(8);
    // The rank-0 log shows the model split between the local CPU and the remote RPC device.
    const rank0Node = cluster.nodes.find((n) =>
      readdirSync(join(n.dataDir, "runners")).some((f) => f.endsWith("rank0.log")),
    )!;
    const log = readFileSync(
      join(rank0Node.dataDir, "runners", `${inst.instance_id}-rank0.log`),
      "utf8",
    );
    expect(log).toMatch(/RPC0\[127\.0\.0\.1:\d+\] model buffer size/);
    expect(log).toMatch(/CPU_Mapped model buffer size/);
    // Staged copies exist on both nodes; the storage report marks them in use.
    for (const node of cluster.nodes) {
      const rep = await node.get<{ staged_models: { model_id: string; in_use: boolean }[] }>(
        "/store/storage",
      );
      if (rep.staged_models.length > 0)
        expect(rep.staged_models[0]).toMatchObject({ model_id: modelId, in_use: true });
    }
    const del = await fetch(`${n2.apiUrl}/instance/${inst.instance_id}`, { method: "DELETE" });
    expect(del.status).toBe(200);
    await waitFor(
      async () => {
        const s = await n1.get<{ instances: unknown[] }>("/state");
        return s.instances.length === 0 ? true : undefined;
      },
      { timeoutMs: 10_000 },
    );
    // No engine process of this instance is left on the machine.
    await waitFor(
      () => {
        const procs = readdirSync("/proc").filter((p) => /^\d+$/.test(p));
        const left = procs.filter((p) => {
          try {
            // Rank 0 loads from a node's staging dir; the other rank is the only ggml-rpc-server here.
            const cmd = readFileSync(`/proc/${p}/cmdline`, "utf8");
            return (
              cmd.includes("ggml-rpc-server") ||
              cluster.nodes.some((n) => cmd.includes(join(n.dataDir, "staging")))
            );
          } catch {
            return false;
          }
        });
        return left.length === 0 ? true : undefined;
      },
      { timeoutMs: 10_000, what: "runner processes gone" },
    );
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
