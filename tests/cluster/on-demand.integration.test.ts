// Capacity that follows demand, on 3 hosts with real engines (docs/capacity.md): with chat.on_demand,
// models load on their first request. node-2 is the only node with room, for one model at a time:
// concurrent first requests through three gateways load the model once; alternating requests for two
// models unload the other (least recently used, idle) and every request is answered; a model whose
// model.json says keep_alive 0 is unloaded once its answer is done, its memory reserved no more; the
// previews say beforehand which instance a load would unload.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { seedStore, startHostCluster, waitFor, waitForConvergence } from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

interface StateDoc {
  node_identities: { node_id: string; name: string }[];
  models: { model_id: string }[];
  instances: { instance_id: string; model_id: string; assignments: { node_id: string }[] }[];
  deployments: { model_id: string; on_demand?: boolean; keep_alive_ms?: number }[];
}
interface EventsDoc {
  records: { type: string; event: { cause?: string; reason?: string } }[];
}
interface Previews {
  nodes: { name: string; reserved_bytes: number }[];
}

/** node-2 offers this much (GiB): one instance of the tiny model fits (about 0.27 GB), two do not. */
const ROOM_GB = 0.45;
/** The other nodes: no instance fits. */
const NO_ROOM_GB = 0.05;

const A = "test/tiny-a";
const B = "test/tiny-b";
const C = "test/tiny-c";

async function chat(n: NodeProcess, model: string): Promise<{ status: number; text: string }> {
  const r = await n.post("/v1/chat/completions", {
    model,
    messages: [{ role: "user", content: "hi" }],
    max_tokens: 4,
  });
  return { status: r.status, text: await r.text() };
}

describe("capacity that follows demand (on demand, across hosts)", () => {
  it("loads once for a burst, unloads the least recently used for room, and unloads keep_alive 0 after its answer", async () => {
    const store = mkdtempSync(join(tmpdir(), "ic-store-"));
    await seedStore(store, { modelId: A });
    await seedStore(store, { modelId: B });
    await seedStore(store, { modelId: C });
    writeFileSync(join(store, "test--tiny-c", "model.json"), JSON.stringify({ keep_alive: 0 }));
    await using cluster = await startHostCluster(3, {
      config: (i) => ({
        ...(i === 0 ? { store_path: store } : {}),
        chat: { on_demand: true },
        node: { memory_limit_gb: i === 1 ? ROOM_GB : NO_ROOM_GB },
      }),
    });
    const [n1, n2, n3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    const [doc] = await waitForConvergence(cluster.nodes, 3);
    const node2 = doc!.node_identities.find((n) => n.name === "node-2")!.node_id;
    for (const [i, n] of cluster.nodes.entries())
      await waitFor(
        async () => ((await n.get<StateDoc>("/state")).models.length === 3 ? true : undefined),
        { timeoutMs: 30_000, what: `three models registered, as node-${i + 1} sees them` },
      );
    const state = () => n1.get<StateDoc>("/state");
    const loaded = async () => (await state()).instances.map((i) => i.model_id);

    // A burst of first requests for A through the three gateways: one load, every request answered.
    const burst = await Promise.all([n1, n2, n3, n1, n3].map((n) => chat(n, A)));
    expect(burst.map((b) => b.status)).toEqual([200, 200, 200, 200, 200]);
    const s = await state();
    expect(s.instances.map((i) => [i.model_id, i.assignments[0]!.node_id])).toEqual([[A, node2]]);
    expect(s.deployments).toMatchObject([{ model_id: A, on_demand: true, keep_alive_ms: 300_000 }]);

    // Alternating: each load unloads the other, which is idle and least recently used.
    for (const [n, model] of [
      [n3, B],
      [n2, A],
      [n1, B],
    ] as const) {
      const r = await chat(n, model);
      expect(r.status, r.text).toBe(200);
      expect(await loaded()).toEqual([model]);
    }
    const events = await n3.get<EventsDoc>("/events?type=DeploymentDeleted");
    const room = events.records.filter((r) => r.event.cause === "room");
    expect(room).toHaveLength(3);
    expect(room[0]!.event.reason).toContain(`to make room for ${B}`);

    // The previews say what a request for C would do now, as the master decides it.
    // (B's request may still count as in flight for a moment: its end is reported within 250 ms.)
    type OnDemandPreview = Previews & {
      on_demand: { ok: boolean; summary?: string; error?: { message: string } };
    };
    const before = await waitFor(
      async () => {
        const p = await n2.get<OnDemandPreview>(`/instance/previews?model_id=${C}`);
        return p.on_demand.ok ? p : undefined;
      },
      { timeoutMs: 5000, what: "a preview of loading C" },
    );
    expect(before.on_demand).toMatchObject({
      ok: true,
      loaded: false,
      nodes: ["node-2"],
      summary: `would unload ${B} on node-2`,
    });
    expect(await loaded()).toEqual([B]);

    // C (keep_alive 0) unloads B for room, answers, and is then unloaded itself: its memory is free.
    expect((await chat(n2, C)).status).toBe(200);
    await waitFor(async () => ((await loaded()).length === 0 ? true : undefined), {
      timeoutMs: 10_000,
      what: "C unloaded after its answer (keep_alive 0)",
    });
    const pv = await n1.get<Previews>(`/instance/previews?model_id=${A}`);
    expect(pv.nodes.find((n) => n.name === "node-2")!.reserved_bytes).toBe(0);
    const idle = (await n2.get<EventsDoc>("/events?type=DeploymentDeleted")).records.filter(
      (r) => r.event.cause === "idle",
    );
    expect(idle).toHaveLength(1);
    expect(idle[0]!.event.reason).toMatch(/^idle for [\d.]+ s \(keep_alive 0 s\): unloaded$/);

    // Every node counted the same decisions from the replicated events.
    const metrics = await (await fetch(`${n3.apiUrl}/metrics`, { headers: n3.authHeaders })).text();
    expect(metrics).toMatch(/ic_capacity_events_total\{action="load"[^}]*\} 5/);
    expect(metrics).toMatch(/ic_capacity_events_total\{action="unload_room"[^}]*\} 4/);
    expect(metrics).toMatch(/ic_capacity_events_total\{action="unload_idle"[^}]*\} 1/);

    // The next request for C loads it again (its staged copy is still on node-2).
    expect((await chat(n3, C)).status).toBe(200);
  });
});
