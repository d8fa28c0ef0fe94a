// Intent survives loss, across hosts: when the node holding a deployment's only instance is killed
// (SIGKILL) or restarted (POST /admin/restart), the master places it again and chat answers again.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  placeAndWait,
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

interface StateDoc {
  node_identities: { node_id: string; name: string }[];
  instances: {
    instance_id: string;
    assignments: { node_id: string; rank: number }[];
    runners: { rank: number; state: string }[];
  }[];
  deployments: { deployment_id: string; instance_id: string; status: string }[];
}

/** Waits until `via` sees the deployment on an instance other than `previous`, ready at rank 0. */
async function replacedAndReady(via: NodeProcess, previous: string): Promise<StateDoc> {
  return waitFor(
    async () => {
      const s = await via.get<StateDoc>("/state");
      const d = s.deployments[0];
      const inst = s.instances.find((i) => i.instance_id === d?.instance_id);
      return d?.status === "Placed" &&
        d.instance_id !== previous &&
        inst?.runners.some((r) => r.rank === 0 && r.state === "RunnerReady")
        ? s
        : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 200, what: `deployment placed again (was ${previous})` },
  );
}

async function chatAnswers(via: NodeProcess, model: string): Promise<void> {
  const r = await via.post("/v1/chat/completions", {
    model,
    messages: [{ role: "user", content: "hi" }],
    max_tokens: 2,
  });
  expect(r.status).toBe(200);
  const body = (await r.json()) as { usage?: { completion_tokens?: number } };
  expect(body.usage?.completion_tokens).toBe(2);
}

const nameOf = (s: StateDoc, instanceId: string) => {
  const a = s.instances.find((i) => i.instance_id === instanceId)!.assignments[0]!;
  return s.node_identities.find((n) => n.node_id === a.node_id)!.name;
};

describe("deployments across hosts", () => {
  it("a killed and then a restarted holder: the deployment is placed again and chat answers, no operator action", async () => {
    const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-store-")));
    await using cluster = await startHostCluster(3, {
      config: (i) => (i === 0 ? { store_path: store } : {}),
    });
    const n1 = cluster.node("node-1");
    const [doc] = await waitForConvergence(cluster.nodes, 3);
    const node1 = doc!.node_identities.find((n) => n.name === "node-1")!.node_id;
    // node-1 (master, store host) is excluded: the instance lands on node-2 or node-3.
    const first = await placeAndWait(n1, {
      model_id: modelId,
      min_nodes: 1,
      excluded_nodes: [node1],
    });
    const s0 = await n1.get<StateDoc>("/state");
    expect(s0.deployments).toEqual([
      expect.objectContaining({ instance_id: first.instance_id, status: "Placed" }),
    ]);
    const holder = nameOf(s0, first.instance_id);
    await chatAnswers(n1, modelId);

    // kill -9 of the holder: placed again on the other survivor (node-1 stays excluded).
    const killedAt = Date.now();
    cluster.node(holder).kill("SIGKILL");
    const s1 = await replacedAndReady(n1, first.instance_id);
    const second = s1.deployments[0]!.instance_id;
    const survivor = nameOf(s1, second);
    expect(survivor).not.toBe(holder);
    expect(survivor).not.toBe("node-1");
    await chatAnswers(n1, modelId);
    expect(Date.now() - killedAt).toBeLessThan(60_000);

    // POST /admin/restart of the new holder: it comes back as a new member and takes it again.
    const r = await cluster.node(survivor).post("/admin/restart", undefined);
    expect(r.status).toBe(202);
    const s2 = await replacedAndReady(n1, second);
    expect(nameOf(s2, s2.deployments[0]!.instance_id)).toBe(survivor);
    await chatAnswers(n1, modelId);
  });
});
