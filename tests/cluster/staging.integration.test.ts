import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  DelayRelay,
  patchConfig,
  placeAndWait,
  seedStore,
  startHostCluster,
  startHubEmulator,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

interface StateDoc {
  models: { model_id: string }[];
  node_identities: { node_id: string; name: string }[];
  instances: {
    instance_id: string;
    runners: { rank: number; state: string; endpoint?: string }[];
  }[];
}

describe("staging through a cluster across hosts", () => {
  it("falls back to a direct model-hub download when the store host is unreachable, and serves", async () => {
    const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-store-")));
    await using hub = await startHubEmulator();
    await hub.addRepo(modelId, {
      "tiny-llama.gguf": { fromPath: join(store, "test--tiny-llama", "tiny-llama.gguf") },
    });
    const hubCache = mkdtempSync(join(tmpdir(), "ic-hubcache-"));
    // node-2 and node-3 are started by hand: their hub URL names the lab's gateway, known once the
    // lab exists. Three nodes, so that the two left after the store host goes keep a quorum of the
    // intent store (placements need it).
    await using cluster = await startHostCluster(3, {
      config: (i) => (i === 0 ? { store_path: store } : {}),
      startOnly: [0],
    });
    const [n1, n2, n3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    // The hub is "the internet": reached from the hosts through their default gateway (the root
    // namespace), where a relay forwards to the emulator on the test process's loopback.
    await using hubRelay = await DelayRelay.start({
      listenHost: cluster.lab.rootAddress,
      targetHost: "127.0.0.1",
      targetPort: Number(new URL(hub.url).port),
      delayMs: 0,
    });
    patchConfig(n2, {
      model_store: {
        hub_url: `http://${hubRelay.address}`,
        hub_fallback: true,
        hub_cache_path: hubCache,
      },
    });
    patchConfig(n3, {
      model_store: {
        hub_url: `http://${hubRelay.address}`,
        hub_fallback: true,
        hub_cache_path: mkdtempSync(join(tmpdir(), "ic-hubcache-")),
      },
    });
    await Promise.all([n2.start(), n3.start()]);
    await waitForConvergence(cluster.nodes, 3);
    await waitFor(
      async () => ((await n2.get<StateDoc>("/state")).models.length === 1 ? true : undefined),
      {
        timeoutMs: 15_000,
        what: "model registered by the store host",
      },
    );
    // The store host (also the master) goes away; the model record survives in the new session.
    n1.kill("SIGKILL");
    await waitForConvergence([n2, n3], 2, 10_000);
    const ids = (await n2.get<StateDoc>("/state")).node_identities;
    const inst = await placeAndWait(
      n2,
      {
        model_id: modelId,
        min_nodes: 1,
        excluded_nodes: ids.filter((n) => n.name !== "node-2").map((n) => n.node_id),
      },
      60_000,
    );
    const r = await n2.post("/v1/chat/completions", {
      model: modelId,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 3,
    });
    expect(r.status).toBe(200);
    expect(hub.requests.some((q) => q.method === "GET" && q.path.includes("tiny-llama.gguf"))).toBe(
      true,
    );
    expect(readdirSync(hubCache).length).toBeGreaterThan(0);
    // The engine is advertised under node-2's host name, not loopback.
    const s = await n2.get<StateDoc>("/state");
    const rank0 = s.instances
      .find((i) => i.instance_id === inst.instance_id)
      ?.runners.find((x) => x.rank === 0);
    expect(rank0?.endpoint).toMatch(/^https:\/\/node-2:\d+$/);
  });
});
