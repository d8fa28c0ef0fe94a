// Chaos: kill -9 of the store host's whole process group while another node stages a model from
// it over a slow link. The staging node must not hang or lose what it already has: once the store
// host is back, staging resumes from the bytes on disk (not from zero) and the instance serves; the
// deployment the operator asked for is kept throughout, and the store host leaves no process behind.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import {
  namespaceProcesses,
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

interface StateDoc {
  node_identities: { node_id: string; name: string }[];
  models: { model_id: string }[];
  deployments: { deployment_id: string; model_id: string }[];
  instances: {
    instance_id: string;
    model_id: string;
    runners: {
      rank: number;
      state: string;
      progress?: { staged_bytes: number; total_bytes: number };
    }[];
  }[];
}

describe("chaos: the store host dies during staging", () => {
  it("staging resumes from what is on disk once the store host is back, and the instance serves", async () => {
    const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-chaos-stg-")), {
      modelId: "chaos/slow",
      slow: true,
    });
    // node-2 holds the store; node-1 (the master) and node-3 do not.
    await using cluster = await startHostCluster(3, {
      config: (i) => (i === 1 ? { store_path: store } : {}),
    });
    const [n1, n2, n3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    await waitForConvergence(cluster.nodes, 3);
    await waitFor(
      async () =>
        (await n1.get<StateDoc>("/state")).models.some((m) => m.model_id === modelId)
          ? true
          : undefined,
      { timeoutMs: 20_000, what: "model registered by the store host" },
    );
    // ~30 MB over 24 Mbit/s: staging takes about 10 s, the kill comes at 4 MB.
    await cluster.lab.limitBandwidth("node-3", { rateMbit: 24 });
    const doc = await n1.get<StateDoc>("/state");
    const exclude = doc.node_identities.filter((x) => x.name !== "node-3").map((x) => x.node_id);
    const placed = await n1.post("/place_instance", {
      model_id: modelId,
      min_nodes: 1,
      excluded_nodes: exclude,
    });
    expect(placed.status).toBe(200);
    const committed = (await n1.get<StateDoc>("/state")).deployments.map((d) => d.deployment_id);
    expect(committed).toHaveLength(1);

    const progress = async () =>
      (await n1.get<StateDoc>("/state")).instances[0]?.runners[0]?.progress?.staged_bytes ?? 0;
    const before = await waitFor(
      async () => {
        const p = await progress();
        return p > 4e6 ? p : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 200, what: "staging under way" },
    );
    n2.kill("SIGKILL");
    await n2.waitExit();
    // The store host's engines and nats-server went with it.
    await waitFor(
      async () =>
        namespaceProcesses(cluster.lab.host("node-2").ns).length === 0 ? true : undefined,
      { timeoutMs: 3000, what: "store host's processes gone" },
    );
    // The staging node stays responsive and keeps the deployment while the store is away.
    await waitForConvergence([n1, n3], 2, 15_000);
    const during = await n3.get<StateDoc>("/state");
    expect(during.deployments.map((d) => d.deployment_id)).toEqual(committed);
    expect(during.instances[0]?.runners[0]?.state).not.toBe("RunnerReady");

    await n2.start();
    await waitForConvergence(cluster.nodes, 3, 30_000);
    // Resumed, not restarted: every progress reported after the return is at least what was on
    // disk before the kill (a restart from zero would report less first).
    const seen: number[] = [];
    await waitFor(
      async () => {
        const r = (await n1.get<StateDoc>("/state")).instances[0]?.runners[0];
        if (r?.progress) seen.push(r.progress.staged_bytes);
        return r?.state === "RunnerReady" ? true : undefined;
      },
      { timeoutMs: 90_000, intervalMs: 100, what: "instance ready after staging resumed" },
    );
    expect(Math.min(...seen.filter((b) => b > 0), before)).toBeGreaterThanOrEqual(before * 0.9);
    const final = await n1.get<StateDoc>("/state");
    expect(final.deployments.map((d) => d.deployment_id)).toEqual(committed);
    const client = new OpenAI({ baseURL: `${n1.apiUrl}/v1`, apiKey: n1.spec.apiToken! });
    const r = await client.chat.completions.create({
      model: modelId,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 3,
    });
    expect(r.choices[0]?.finish_reason).toBeDefined();
  });
});
