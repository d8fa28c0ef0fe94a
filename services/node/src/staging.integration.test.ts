import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  placeAndWait,
  seedStore,
  startCluster,
  startHubEmulator,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";

describe("staging through the cluster", () => {
  it("falls back to a direct model-hub download when the store host is unreachable, and serves", async () => {
    const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-store-")));
    await using hub = await startHubEmulator();
    await hub.addRepo(modelId, {
      "tiny-llama.gguf": { fromPath: join(store, "test--tiny-llama", "tiny-llama.gguf") },
    });
    const hubCache = mkdtempSync(join(tmpdir(), "ic-hubcache-"));
    await using cluster = await startCluster(2, {
      config: (i) =>
        i === 0
          ? { store_path: store }
          : { model_store: { hub_url: hub.url, hub_cache_path: hubCache } },
    });
    const [n1, n2] = cluster.nodes as [(typeof cluster.nodes)[0], (typeof cluster.nodes)[0]];
    await waitForConvergence(cluster.nodes, 2);
    await waitFor(
      async () =>
        (await n2.get<{ models: unknown[] }>("/state")).models.length === 1 ? true : undefined,
      {
        timeoutMs: 15_000,
        what: "model registered by the store host",
      },
    );
    // The store host (also the master) goes away; the model record survives in the new session.
    n1.kill("SIGKILL");
    await waitForConvergence([n2], 1, 10_000);
    await placeAndWait(n2, { model_id: modelId, min_nodes: 1 }, 60_000);
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
  });
});
