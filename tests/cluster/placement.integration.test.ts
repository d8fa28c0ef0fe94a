// Placement counts what is already placed, across hosts: two placements racing through two nodes for
// memory that fits the model once get exactly one 200; later ones see the reservation; a node whose
// engine is unusable is refused by name with node_unhealthy and shown as no candidate in the previews.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { seedStore, startHostCluster, waitFor, waitForConvergence } from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

interface StateDoc {
  node_identities: { node_id: string; name: string }[];
  models: { model_id: string }[];
  instances: { instance_id: string; assignments: { node_id: string }[] }[];
}
interface ErrorBody {
  error: { code: string; message: string; details?: Record<string, unknown> };
}
interface Previews {
  nodes: {
    name: string;
    candidate: boolean;
    reserved_bytes: number;
    unavailable?: { health_code: string };
  }[];
  previews: {
    sharding: string;
    nodes: number;
    ok: boolean;
    assignments?: { required_bytes: number }[];
    error?: { code: string; node_id?: string };
  }[];
}

/** node-2 offers this much (GiB): one instance of the tiny model fits (about 0.27 GB), two do not. */
const LIMIT_GB = 0.45;

describe("placement counts what is already placed (across hosts)", () => {
  it("settles a race through two nodes, keeps reservations for later placements, and refuses an unhealthy node by name", async () => {
    const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-store-")));
    await using cluster = await startHostCluster(3, {
      config: (i) => ({
        ...(i === 0 ? { store_path: store } : {}),
        ...(i === 1 ? { node: { memory_limit_gb: LIMIT_GB } } : {}),
      }),
      env: (i): Record<string, string> =>
        i === 2 ? { SERVICE_ENGINE_SERVER_BIN: "/nonexistent" } : {},
    });
    const [n1, n2, n3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    const [doc] = await waitForConvergence(cluster.nodes, 3);
    const id = (name: string) => doc!.node_identities.find((n) => n.name === name)!.node_id;
    await waitFor(
      async () =>
        (await n2.get<StateDoc>("/state")).models.some((m) => m.model_id === modelId)
          ? true
          : undefined,
      { timeoutMs: 20_000, what: "model registered" },
    );

    // The previews say node-3 is no candidate, and why; node-2's one share fits its limit once only.
    const pv = await waitFor(
      async () => {
        const r = await n1.get<Previews>(
          `/instance/previews?model_id=${modelId}&excluded_node_ids=${id("node-1")},${id("node-3")}`,
        );
        return r.previews[0]?.ok ? r : undefined;
      },
      { timeoutMs: 15_000, what: "previews with every node's telemetry" },
    );
    expect(pv.nodes.find((n) => n.name === "node-3")).toMatchObject({
      candidate: false,
      unavailable: { health_code: "invalid_engine_binary" },
    });
    const required = pv.previews[0]!.assignments![0]!.required_bytes;
    expect(required).toBeLessThan(LIMIT_GB * 1024 ** 3);
    expect(2 * required).toBeGreaterThan(LIMIT_GB * 1024 ** 3);

    // Two placements at the same moment through two different nodes, both onto node-2 only.
    const body = { model_id: modelId, min_nodes: 1, excluded_nodes: [id("node-1"), id("node-3")] };
    const answers = await Promise.all([
      n1.post("/place_instance", body),
      n2.post("/place_instance", body),
    ]);
    expect(answers.map((a) => a.status).sort()).toEqual([200, 400]);
    const lost = (await answers.find((a) => a.status === 400)!.json()) as ErrorBody;
    expect(lost.error.code).toBe("insufficient_memory");
    expect(lost.error.details?.node_id).toBe(id("node-2"));
    expect(lost.error.message).toContain(`node node-2 (${id("node-2")}) cannot fit its share`);
    expect(lost.error.message).toMatch(/needs \d+\.\d\d GB \(.*\) but has \d+\.\d\d GB free/);
    const s = await n1.get<StateDoc>("/state");
    expect(s.instances).toHaveLength(1);
    expect(s.instances[0]!.assignments.map((a) => a.node_id)).toEqual([id("node-2")]);

    // Sequential: a later placement through the third node sees the reservation.
    await waitFor(
      async () => ((await n3.get<StateDoc>("/state")).instances.length === 1 ? true : undefined),
      { timeoutMs: 5000, what: "the instance on node-3's replica" },
    );
    const later = await n3.post("/place_instance", body);
    expect(later.status).toBe(400);
    const laterBody = (await later.json()) as ErrorBody;
    expect(laterBody.error.code).toBe("insufficient_memory");
    expect(laterBody.error.details?.node_id).toBe(id("node-2"));
    expect(laterBody.error.message).toContain("reserved by instances already placed there");

    // The node with an unusable engine is refused by name, with its health code.
    const bad = await n1.post("/place_instance", {
      model_id: modelId,
      min_nodes: 1,
      excluded_nodes: [id("node-1"), id("node-2")],
    });
    expect(bad.status).toBe(400);
    const badBody = (await bad.json()) as ErrorBody;
    expect(badBody.error.code).toBe("node_unhealthy");
    expect(badBody.error.details).toEqual({
      node_id: id("node-3"),
      health_code: "invalid_engine_binary",
    });
    expect(badBody.error.message).toContain(`node node-3 (${id("node-3")}) is not a candidate`);
  });
});
