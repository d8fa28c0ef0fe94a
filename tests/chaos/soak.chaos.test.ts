// The soak, short: three nodes on lab hosts with tokens and a cluster secret, the tiny model placed
// twice, four clients sending chat requests without pause through every node that is up, while
// every node is restarted in turn (SIGTERM, the master first), then all at once (SIGTERM), then all
// killed at once (kill -9). No node may end on its own; every failed request is a typed retryable
// error or was in flight through a node being stopped; no bus message exceeds the sync page budget;
// and after each restart the deployments serve again with no operator action. The store host's
// store_path also holds two big sparse models: a 100 GiB one whose manifest lists another size
// (reported, never hashed) and a 4 GiB one whose manifest predates piece hashes (hashed again in
// the background after each restart of the store host): neither holds the demo model back.
// bench/soak is the long version, with figures.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it, onTestFailed } from "vitest";
import { GiB } from "@ic/protocol";
import {
  placeAndWait,
  seedBigSparseModel,
  seedStore,
  soak,
  startHostCluster,
  tally,
  unexplainedFailures,
  waitForConvergence,
} from "@ic/testkit";

const MODEL = "test/tiny-llama";
/** The sync page budget (a quarter of nats-server's 1 MiB max_payload, at most 256 KiB). */
const BUDGET = 256 * 1024;

describe("soak: steady traffic through restarts", () => {
  it("rolling, full SIGTERM and full kill -9 restarts under load: no crash, only typed or in-flight failures, deployments back", async () => {
    const store = mkdtempSync(join(tmpdir(), "ic-store-"));
    await seedStore(store, { modelId: MODEL });
    await seedBigSparseModel(store, {
      modelId: "test/big-bad",
      bytes: 100 * GiB,
      manifest: "wrong-size",
    });
    await seedBigSparseModel(store, {
      modelId: "test/big-old",
      bytes: 4 * GiB,
      manifest: "pre-pieces",
    });
    await using cluster = await startHostCluster(3, {
      config: (i) => (i === 0 ? { store_path: store } : {}),
    });
    onTestFailed(() => {
      for (const n of cluster.nodes)
        process.stderr.write(`--- ${n.spec.name} ---\n${n.logLines.slice(-40).join("\n")}\n`);
    });
    await waitForConvergence(cluster.nodes, 3, 60_000);
    const [n1, n2] = cluster.nodes;
    await placeAndWait(n1!, { model_id: MODEL, min_nodes: 1 });
    await placeAndWait(n2!, { model_id: MODEL, min_nodes: 1 });
    const report = await soak(cluster, {
      model: MODEL,
      clients: 4,
      sampleMs: 2000,
      note: (l) => process.stderr.write(`[soak] ${l}\n`),
      phases: [
        { kind: "load", seconds: 5 },
        { kind: "rolling" },
        { kind: "load", seconds: 3 },
        { kind: "full", signal: "SIGTERM" },
        { kind: "load", seconds: 3 },
        { kind: "full", signal: "SIGKILL" },
        { kind: "load", seconds: 5 },
      ],
    });
    const t = tally(report);
    process.stderr.write(
      `[soak] ${report.requests.length} requests in ${report.seconds.toFixed(0)} s: ${JSON.stringify(t.byPhase)}; recoveries ${JSON.stringify(report.recoveries)}; largest bus message ${JSON.stringify(report.largestBusMessage)}; events ${report.eventsSequenced}\n`,
    );
    expect(report.crashes).toEqual([]);
    expect(unexplainedFailures(report)).toEqual([]);
    expect(t.byCode.ok).toBeGreaterThan(100);
    for (const [name, bytes] of Object.entries(report.largestBusMessage))
      expect(bytes, name).toBeLessThanOrEqual(BUDGET);
    // Chat adds nothing to the replicated log: what was sequenced is membership and placement.
    expect(report.eventsSequenced).toBeLessThan(report.requests.length / 10);
    expect(report.recoveries).toHaveLength(5);
    // The store host names the model whose files differ from its manifest, and never hashed it.
    const state = await n1!.get<{ nodeHealth: { code: string; model_id?: string }[] }>("/state");
    expect(state.nodeHealth).toContainEqual(
      expect.objectContaining({ code: "store_model_changed", model_id: "test/big-bad" }),
    );
    const hashedBad = cluster.nodes.some((n) =>
      n.logLines.some((l) => l.includes('"msg":"hashing started"') && l.includes("test/big-bad")),
    );
    expect(hashedBad).toBe(false);
  }, 600_000);
});
