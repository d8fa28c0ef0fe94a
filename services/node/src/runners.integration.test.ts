import { mkdtempSync, readFileSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { placeAndWait, seedStore, startCluster, waitFor, waitForConvergence } from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

function pidsOf(binary: string, mustInclude: string): number[] {
  return readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        const cmd = readFileSync(`/proc/${p}/cmdline`, "utf8");
        return cmd.includes(binary) && cmd.includes(mustInclude);
      } catch {
        return false;
      }
    })
    .map(Number);
}

describe("runners", () => {
  it("a drafter pairing runs llama-server with -md and the runner log shows speculative decoding statistics", async () => {
    const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-store-")), {
      drafterId: "test/tiny-drafter",
    });
    await using cluster = await startCluster(1, {
      config: () => ({ store_path: store, engine: { context_size: 1024 } }),
    });
    const node = cluster.nodes[0]!;
    await waitForConvergence(cluster.nodes, 1);
    await waitFor(
      async () =>
        (await node.get<{ models: unknown[] }>("/state")).models.length === 2 ? true : undefined,
      { timeoutMs: 10_000 },
    );
    const inst = await placeAndWait(node, { model_id: modelId });
    const client = new OpenAI({ baseURL: `${node.apiUrl}/v1`, apiKey: "unused" });
    const r = await client.chat.completions.create({
      model: modelId,
      messages: [{ role: "user", content: "Tell me about the world" }],
      max_tokens: 32,
      temperature: 0,
    });
    expect(r.usage?.completion_tokens).toBe(32);
    // llama-server prints the statistics as the request finishes, possibly just after the response.
    const line = await waitFor(
      () => {
        const log = readFileSync(
          join(node.dataDir, "runners", `${inst.instance_id}-rank0.log`),
          "utf8",
        );
        return /draft acceptance = [\d.]+ \(\s*\d+ accepted \/\s*\d+ generated\)/.exec(log)?.[0];
      },
      { timeoutMs: 5000, what: "speculative decoding statistics in the runner log" },
    );
    expect(line).toMatch(/accepted/);
    // The drafter is staged with the model and counted as in use.
    const rep = await node.get<{ staged_models: { model_id: string; in_use: boolean }[] }>(
      "/store/storage",
    );
    expect(rep.staged_models.find((m) => m.model_id === "test/tiny-drafter")?.in_use).toBe(true);
  });

  it("a crashed remote rank is restarted, rank 0 reconnects to it, and the instance serves again", async () => {
    const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-store-")));
    await using cluster = await startCluster(2, {
      config: (i) => (i === 0 ? { store_path: store } : {}),
    });
    const [n1] = cluster.nodes as [NodeProcess, NodeProcess];
    await waitForConvergence(cluster.nodes, 2);
    const inst = await placeAndWait(n1, { model_id: modelId, min_nodes: 2 });
    const rpcPid = pidsOf("ggml-rpc-server", "-p")[0]!;
    expect(rpcPid).toBeGreaterThan(0);
    process.kill(rpcPid, "SIGKILL");
    // Rank 1 restarts on a new port; rank 0 is stopped meanwhile and restarted against the new endpoint.
    await waitFor(
      async () => {
        const s = await n1.get<{
          instances: {
            instance_id: string;
            runners: { rank: number; state: string; restarts: number }[];
          }[];
        }>("/state");
        const rs = s.instances.find((i) => i.instance_id === inst.instance_id)?.runners ?? [];
        const r1 = rs.find((r) => r.rank === 1);
        const r0 = rs.find((r) => r.rank === 0);
        return r1?.restarts === 1 && r1.state === "RunnerReady" && r0?.state === "RunnerReady"
          ? true
          : undefined;
      },
      { timeoutMs: 30_000, what: "instance serving again" },
    );
    const client = new OpenAI({ baseURL: `${n1.apiUrl}/v1`, apiKey: "unused" });
    const r = await client.chat.completions.create({
      model: modelId,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 4,
    });
    expect(r.usage?.completion_tokens).toBe(4);
  });

  it("an unusable SERVICE_ENGINE_SERVER_BIN is reported in nodeHealth as invalid_engine_binary and is not replaced", async () => {
    await using cluster = await startCluster(2, {
      env: (i): Record<string, string> =>
        i === 1 ? { SERVICE_ENGINE_SERVER_BIN: "/nonexistent/llama-server" } : {},
    });
    const doc = await waitFor(
      async () => {
        const d = await cluster.nodes[0]!.get<{
          nodeHealth: {
            node_name: string;
            code: string;
            severity: string;
            message: string;
            remediation: string;
          }[];
        }>("/state");
        return d.nodeHealth.some((h) => h.node_name === "node-2") ? d : undefined;
      },
      { timeoutMs: 15_000, what: "nodeHealth entry" },
    );
    const h = doc.nodeHealth.find((x) => x.node_name === "node-2")!;
    expect(h).toMatchObject({ code: "invalid_engine_binary", severity: "warn" });
    expect(h.message).toContain("/nonexistent/llama-server");
    expect(h.remediation).toContain("SERVICE_ENGINE_SERVER_BIN");
    expect(doc.nodeHealth.filter((x) => x.node_name === "node-1")).toEqual([]);
  });
});
