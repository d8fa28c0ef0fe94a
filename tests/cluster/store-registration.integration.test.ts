// A store host whose store_path holds two 100 GiB models (sparse: a GGUF header, then zeros) beside
// the demo model: one with a manifest written before piece hashes existed (served at once, its piece
// hashes added in the background), one whose manifest lists another size (reported, never hashed).
// The demo model is registered and placeable within 10 s of the cluster forming, nodeHealth names
// the bad model and shows the hash's progress, and only the one pool hashes.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { GiB } from "@ic/protocol";
import {
  seedBigSparseModel,
  seedStore,
  startCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { LocalCluster } from "@ic/testkit";

interface StateDoc {
  models: { model_id: string }[];
  nodeHealth: { code: string; severity: string; message: string; model_id?: string }[];
}

let cluster: LocalCluster | undefined;
afterAll(async () => {
  await cluster?.[Symbol.asyncDispose]();
});

describe("store registration never waits on hashing", () => {
  it("two 100 GiB models (an old manifest, a wrong one) beside the demo model: the demo model is placeable within 10 s of the cluster forming; nodeHealth names the bad one and the hash's progress", async () => {
    const store = mkdtempSync(join(tmpdir(), "ic-store-"));
    const { modelId } = await seedStore(store);
    await seedBigSparseModel(store, {
      modelId: "test/big-old",
      bytes: 100 * GiB,
      manifest: "pre-pieces",
    });
    await seedBigSparseModel(store, {
      modelId: "test/big-bad",
      bytes: 100 * GiB,
      manifest: "wrong-size",
    });
    cluster = await startCluster(1, { config: () => ({ store_path: store }) });
    const [node] = cluster.nodes;
    await waitForConvergence(cluster.nodes, 1);
    const formed = Date.now();
    await waitFor(
      async () =>
        (await node!.get<StateDoc>("/state")).models.some((m) => m.model_id === modelId)
          ? true
          : undefined,
      { timeoutMs: 10_000, intervalMs: 100, what: "the demo model registered" },
    );
    const placed = await node!.post("/place_instance", { model_id: modelId });
    const placedMs = Date.now() - formed;
    expect(placed.status, await placed.text()).toBe(200);
    expect(placedMs).toBeLessThan(10_000);

    const health = await waitFor(
      async () => {
        const h = (await node!.get<StateDoc>("/state")).nodeHealth;
        return h.some((e) => e.code === "store_model_changed") &&
          h.some((e) => e.code === "store_hashing")
          ? h
          : undefined;
      },
      { timeoutMs: 10_000, what: "store_model_changed and store_hashing in nodeHealth" },
    );
    const changed = health.find((e) => e.code === "store_model_changed")!;
    expect(changed).toMatchObject({ severity: "warn", model_id: "test/big-bad" });
    expect(changed.message).toContain("big.gguf");
    const hashing = health.find((e) => e.code === "store_hashing")!;
    expect(hashing).toMatchObject({ severity: "info", model_id: "test/big-old" });
    expect(hashing.message).toMatch(/of 100\.00 GiB/);
    // The old manifest's model is served (whole) while its piece hashes are added.
    const models = (await node!.get<StateDoc>("/state")).models.map((m) => m.model_id);
    expect(models).toContain("test/big-old");
    expect(models).not.toContain("test/big-bad");
    // The bad model is never hashed; the demo model (no manifest) went ahead of the big backfill.
    const started = node!.logLines.filter((l) => l.includes('"msg":"hashing started"'));
    expect(
      started.some((l) => l.includes("test/big-bad")),
      started.join("\n"),
    ).toBe(false);
    expect(started.some((l) => l.includes(modelId))).toBe(true);
    process.stderr.write(`store registration: demo model placed ${placedMs} ms after forming\n`);
  }, 120_000);
});
