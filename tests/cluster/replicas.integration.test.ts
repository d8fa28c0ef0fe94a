// Replicas across 3 hosts (network namespaces) with a real llama-server: `replicas: 2` places two
// instances on distinct nodes, chat goes to both; the holder of one is killed and the master places
// it again only where its sibling is not (it waits while no such node is up); a placement asking
// more replicas than there are nodes is refused whole, leaving nothing behind.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
  waitForReadyInstances,
} from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

interface StateDoc {
  node_identities: { node_id: string; name: string }[];
  instances: {
    instance_id: string;
    model_id: string;
    assignments: { node_id: string }[];
    runners: { rank: number; state: string }[];
  }[];
  deployments: {
    deployment_id: string;
    replica_set?: string;
    status: string;
    instance_id: string;
  }[];
}

describe("replicas", () => {
  it("keeps two instances on distinct nodes, re-places a lost one away from its sibling, refuses too many", async () => {
    const store = mkdtempSync(join(tmpdir(), "ic-store-"));
    const { modelId } = await seedStore(store);
    await using cluster = await startHostCluster(3, {
      // Identical requests are one conversation to prefix routing; the spread checked below is the
      // least-outstanding one.
      config: (i) => ({
        chat: { prefix_routing: false },
        ...(i === 0 ? { store_path: store } : {}),
      }),
    });
    const [n1, n2, n3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    await waitForConvergence(cluster.nodes, 3);
    await waitFor(
      async () =>
        (await n1.get<{ models: { model_id: string }[] }>("/state")).models.length > 0
          ? true
          : undefined,
      { timeoutMs: 20_000, what: "the model registered" },
    );
    const nameOf = async (id: string) =>
      (await n2.get<StateDoc>("/state")).node_identities.find((m) => m.node_id === id)?.name;

    // More replicas than nodes: refused whole, naming the replica; nothing left behind.
    const tooMany = await n2.post("/place_instance", { model_id: modelId, replicas: 4 });
    expect(tooMany.status).toBe(400);
    const err = ((await tooMany.json()) as { error: { code: string; message: string } }).error;
    expect(err.message).toMatch(/^replica 4 of 4 \(each on nodes the others do not use\): /);
    await waitFor(
      async () => ((await n2.get<StateDoc>("/state")).instances.length === 0 ? true : undefined),
      { timeoutMs: 10_000, what: "the three replicas placed before the refusal taken back" },
    );

    // Two replicas (node-1 left out, so the third node is free for the re-placement).
    const placed = await n2.post("/place_instance", {
      model_id: modelId,
      replicas: 2,
      excluded_nodes: ["node-1"],
    });
    expect(placed.status).toBe(200);
    const body = (await placed.json()) as {
      instances: { instance_id: string; assignments: { node_id: string }[] }[];
    };
    expect(body.instances).toHaveLength(2);
    const holders = body.instances.map((i) => i.assignments[0]!.node_id);
    expect(new Set(holders).size).toBe(2);
    expect((await Promise.all(holders.map(nameOf))).sort()).toEqual(["node-2", "node-3"]);
    const ready = (count: number) => waitForReadyInstances<StateDoc>(n1, count);
    await ready(2);
    // Requests at once spread over both (least outstanding requests first).
    const answers = await Promise.all(
      Array.from({ length: 6 }, () =>
        n1.post("/v1/chat/completions", {
          model: modelId,
          messages: [{ role: "user", content: "hi" }],
          max_tokens: 16,
        }),
      ),
    );
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
    const served = new Set(answers.map((r) => r.headers.get("x-instance-id")));
    expect(served.size).toBe(2);
    const s0 = await n1.get<StateDoc>("/state");
    expect(s0.deployments).toHaveLength(2);
    expect(new Set(s0.deployments.map((d) => d.replica_set)).size).toBe(1);

    // node-3 dies: node-1 is excluded by the placement and node-2 holds the sibling, so the lost
    // replica waits (Pending) rather than going beside its sibling.
    n3.kill("SIGKILL");
    await waitForConvergence([n1, n2], 2, 15_000);
    const pending = await waitFor(
      async () => {
        const s = await n1.get<StateDoc>("/state");
        return s.deployments.find((d) => d.status === "Pending");
      },
      { timeoutMs: 30_000, what: "the lost replica pending (no node but its sibling's is left)" },
    );
    expect(pending.replica_set).toBe(s0.deployments[0]!.replica_set);
    // The sibling still serves.
    const r = await n1.post("/v1/chat/completions", {
      model: modelId,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 2,
    });
    expect(r.status).toBe(200);
    // node-3 back: the replica is placed there again, two ready, on distinct nodes.
    await n3.start();
    await waitForConvergence(cluster.nodes, 3, 20_000);
    const s = await ready(2);
    const nodes = s.instances.map((i) => i.assignments[0]!.node_id);
    expect(new Set(nodes).size).toBe(2);
    expect((await Promise.all(nodes.map(nameOf))).sort()).toEqual(["node-2", "node-3"]);
  }, 240_000);
});
