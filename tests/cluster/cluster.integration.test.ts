import { describe, expect, it } from "vitest";
import { startHostCluster, waitForConvergence, waitFor } from "@ic/testkit";

describe("a 3-node cluster across hosts", () => {
  it("converges to one master and one session, and every node lists all 3 identities", async () => {
    await using cluster = await startHostCluster(3);
    const docs = await waitForConvergence(cluster.nodes, 3);
    for (const d of docs) {
      expect(d.node_identities).toHaveLength(3);
      expect(d.node_identities.filter((n) => n.is_master)).toHaveLength(1);
    }
    // The most senior node (started first) is master.
    expect(docs[0]!.node_identities.find((n) => n.is_master)?.name).toBe("node-1");
  });

  it("kill -9 of the master gives a new master and a new session on the survivors", async () => {
    await using cluster = await startHostCluster(3);
    const before = await waitForConvergence(cluster.nodes, 3);
    const oldSession = before[0]!.session!.session_id;
    const killedAt = Date.now();
    cluster.nodes[0]!.kill("SIGKILL");
    const after = await waitForConvergence(cluster.nodes.slice(1), 2, 10_000);
    const elapsed = Date.now() - killedAt;
    expect(after[0]!.session!.session_id).not.toBe(oldSession);
    expect(after[0]!.node_identities.find((n) => n.is_master)?.name).toBe("node-2");
    expect(elapsed).toBeLessThan(6000);
  });

  it("kill -9 of a worker removes it from node_identities, and a restarted node rejoins", async () => {
    await using cluster = await startHostCluster(3);
    await waitForConvergence(cluster.nodes, 3);
    const victim = cluster.nodes[2]!;
    victim.kill("SIGKILL");
    await waitForConvergence(cluster.nodes.slice(0, 2), 2, 6000);
    await victim.stop();
    await victim.start();
    const docs = await waitForConvergence(cluster.nodes, 3);
    expect(docs.map((d) => d.session!.session_id)).toEqual(
      Array(3).fill(docs[0]!.session!.session_id),
    );
  });

  it("POST /admin/restart returns and the node is back in its peers' state", async () => {
    await using cluster = await startHostCluster(2);
    const before = await waitForConvergence(cluster.nodes, 2);
    const oldId = before[0]!.node_identities.find((n) => n.name === "node-2")!.node_id;
    const oldPeerKey = cluster.nodes[1]!.peerKey;
    const r = await fetch(`${cluster.nodes[1]!.apiUrl}/admin/restart`, {
      method: "POST",
      headers: cluster.nodes[1]!.authHeaders,
    });
    expect(r.status).toBe(202);
    // A fresh process image (new peer key, so a new node id) joins the same session again.
    await waitFor(
      async () => {
        const d = await cluster.nodes[0]!.get<{
          node_identities: { name: string; node_id: string }[];
        }>("/state");
        const n2 = d.node_identities.filter((n) => n.name === "node-2");
        return d.node_identities.length === 2 && n2.length === 1 && n2[0]!.node_id !== oldId
          ? true
          : undefined;
      },
      { timeoutMs: 15_000, what: "restarted node back" },
    );
    expect(cluster.nodes[1]!.peerKey).not.toBe(oldPeerKey);
  });
});
