// Intent survives every way a whole cluster goes down: three nodes on lab hosts (network
// namespaces), two deployments; every node stopped at once (SIGTERM), killed at once (kill -9),
// and restarted one by one until no old process is left. Each time the deployments come back from
// the intent store (JetStream, on the nodes' own disks) and serve through every node, with no
// operator action.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it, onTestFailed } from "vitest";
import {
  placeAndWait,
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { HostCluster, NodeProcess } from "@ic/testkit";

interface Doc {
  deployments: { deployment_id: string; model_id: string; instance_id: string; status: string }[];
  instances: { instance_id: string; runners: { rank: number; state: string }[] }[];
}

const MODEL = "test/tiny-llama";

async function chat(n: NodeProcess): Promise<number> {
  const r = await n
    .post("/v1/chat/completions", {
      model: MODEL,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 2,
    })
    .catch(() => undefined);
  await r?.arrayBuffer();
  return r?.status ?? 0;
}

/** Waits until every node lists exactly `ids` as deployments, each with a ready instance, and chat answers 200 through each node. */
async function servesAgain(
  cluster: HostCluster,
  ids: readonly string[],
  what: string,
): Promise<number> {
  const t0 = Date.now();
  await waitForConvergence(cluster.nodes, 3, 120_000);
  await waitFor(
    async () => {
      for (const n of cluster.nodes) {
        const d = await n.get<Doc>("/state");
        const deps = d.deployments.map((x) => x.deployment_id).sort();
        if (JSON.stringify(deps) !== JSON.stringify([...ids].sort())) return undefined;
        const ready = d.deployments.every((x) =>
          d.instances
            .find((i) => i.instance_id === x.instance_id)
            ?.runners.some((r) => r.rank === 0 && r.state === "RunnerReady"),
        );
        if (!ready) return undefined;
        if ((await chat(n)) !== 200) return undefined;
      }
      return true;
    },
    { timeoutMs: 120_000, intervalMs: 250, what },
  );
  return Date.now() - t0;
}

describe("intent across a full restart", () => {
  it("deployments come back after every node stopped, after every node was killed, and through a rolling restart", async () => {
    const store = mkdtempSync(join(tmpdir(), "ic-store-"));
    await seedStore(store, { modelId: MODEL });
    await using cluster = await startHostCluster(3, {
      config: (i) => (i === 0 ? { store_path: store } : {}),
    });
    onTestFailed(() => {
      for (const n of cluster.nodes)
        process.stderr.write(`--- ${n.spec.name} ---\n${n.logLines.slice(-40).join("\n")}\n`);
      if (process.env.IC_TEST_LOG_DIR)
        for (const n of cluster.nodes)
          writeFileSync(join(process.env.IC_TEST_LOG_DIR, `${n.spec.name}.log`), n.logLines.join("\n"));
    });
    await waitForConvergence(cluster.nodes, 3, 60_000);
    const [n1, n2] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    await placeAndWait(n1, { model_id: MODEL, min_nodes: 1 });
    await placeAndWait(n2, { model_id: MODEL, min_nodes: 1 });
    const ids = (await n1.get<Doc>("/state")).deployments.map((d) => d.deployment_id);
    expect(ids).toHaveLength(2);
    const took: Record<string, number> = {};

    // Every node stopped at once (SIGTERM), as `docker compose down`, then started again.
    await Promise.all(cluster.nodes.map((n) => n.stop()));
    for (const n of cluster.nodes) await n.start(60_000);
    took.sigterm = await servesAgain(cluster, ids, "deployments after a full SIGTERM restart");

    // Every node killed at once (kill -9: a power cut), then started again.
    for (const n of cluster.nodes) n.kill("SIGKILL");
    await Promise.all(cluster.nodes.map((n) => n.waitExit()));
    for (const n of cluster.nodes) await n.start(60_000);
    took.kill9 = await servesAgain(cluster, ids, "deployments after every node was killed");

    // One by one, the master first, until no process of the previous run is left.
    for (const n of cluster.nodes) {
      await n.stop();
      await n.start(60_000);
      await waitForConvergence(cluster.nodes, 3, 60_000);
    }
    took.rolling = await servesAgain(cluster, ids, "deployments after a rolling restart");
    process.stderr.write(`[restart] serving again after: ${JSON.stringify(took)} ms\n`);
  }, 600_000);
});
