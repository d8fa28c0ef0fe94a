// Two instances of one model on two hosts share the load (each llama-server's /metrics counts its
// own work), and a model placed a moment ago answers a retryable 404 with Retry-After until ready.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  engineKeyOf,
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
    model_id: string;
    runners: {
      rank: number;
      state: string;
      endpoint?: string;
      node_id: string;
      progress?: { staged_bytes: number; total_bytes: number };
      warmup_started_at?: number;
    }[];
  }[];
}

const idOf = (doc: StateDoc, name: string) =>
  doc.node_identities.find((n) => n.name === name)!.node_id;

function chat(node: NodeProcess, model: string, maxTokens: number) {
  return node.post("/v1/chat/completions", {
    model,
    messages: [{ role: "user", content: "Write a story" }],
    max_tokens: maxTokens,
    ignore_eos: true,
  });
}

describe("load balancing across the ready instances of a model", () => {
  it("answers 404 model_not_ready with Retry-After while warming, then both instances serve", async () => {
    const store = mkdtempSync(join(tmpdir(), "ic-store-"));
    // The slow (wider) model on one thread keeps requests in flight long enough to overlap.
    const { modelId } = await seedStore(store, { slow: true });
    await using cluster = await startHostCluster(2, {
      config: (i) => ({
        ...(i === 0 ? { store_path: store } : {}),
        // Identical requests are one conversation to prefix routing (kept on one instance within
        // its load bound); this test is about the least-outstanding spread.
        chat: { prefix_routing: false },
        engine: { context_size: 1024, extra_args: ["-t", "1"] },
      }),
    });
    const [n1, n2] = cluster.nodes as [NodeProcess, NodeProcess];
    const doc = (await waitForConvergence(cluster.nodes, 2))[0] as unknown as StateDoc;

    // The first instance, on node-1: asked for right after the placement is sequenced.
    await waitFor(
      async () =>
        (await n1.get<{ models: { model_id: string }[] }>("/state")).models.length > 0
          ? true
          : undefined,
      { timeoutMs: 20_000, what: "model registered" },
    );
    const placed = await n1.post("/place_instance", {
      model_id: modelId,
      excluded_nodes: [idOf(doc, "node-2")],
    });
    expect(placed.status, await placed.clone().text()).toBe(200);
    const early = await chat(n1, modelId, 2);
    const body = (await early.json()) as {
      error: { code: string; retryable: boolean; message: string };
    };
    expect(early.status, JSON.stringify(body)).toBe(404);
    expect(body.error).toMatchObject({ code: "model_not_ready", retryable: true });
    expect(body.error.message).toMatch(/is (starting|staging|warming up) on node-1/);
    expect(Number(early.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    // Not ready: /v1/models leaves it out.
    expect((await n1.get<{ data: unknown[] }>("/v1/models")).data).toEqual([]);

    await waitFor(
      async () =>
        (await n1.get<StateDoc>("/state")).instances[0]?.runners.some(
          (r) => r.rank === 0 && r.state === "RunnerReady",
        )
          ? true
          : undefined,
      { timeoutMs: 60_000, what: "first instance ready" },
    );
    expect((await chat(n1, modelId, 2)).status).toBe(200);
    expect((await n1.get<{ data: { id: string }[] }>("/v1/models")).data.map((m) => m.id)).toEqual([
      modelId,
    ]);

    // The second instance, on node-2.
    const second = await placeAndWait(n1, {
      model_id: modelId,
      excluded_nodes: [idOf(doc, "node-1")],
    });
    const state = await waitFor(
      async () => {
        const s = await n1.get<StateDoc>("/state");
        return s.instances.length === 2 &&
          s.instances.every((i) => i.runners.some((r) => r.rank === 0 && r.state === "RunnerReady"))
          ? s
          : undefined;
      },
      { timeoutMs: 20_000, what: "both instances ready on node-1" },
    );
    expect(state.instances.map((i) => i.instance_id)).toContain(second.instance_id);

    // Each engine's /metrics, by the address of its host (the test runs outside the lab hosts).
    const engines = state.instances.map((i) => {
      const r0 = i.runners.find((r) => r.rank === 0)!;
      const host = state.node_identities.find((n) => n.node_id === r0.node_id)!.name;
      const url = new URL(r0.endpoint!);
      url.hostname = cluster.lab.host(host).address;
      const key = engineKeyOf(url.port, url.hostname);
      return { id: i.instance_id, host, url: url.origin, key };
    });
    const predicted = async (e: (typeof engines)[number]) => {
      const text = await (
        await fetch(`${e.url}/metrics`, { headers: { authorization: `Bearer ${e.key}` } })
      ).text();
      const line = text.split("\n").find((l) => l.startsWith("llamacpp:tokens_predicted_total "));
      return Number(line!.split(" ")[1]);
    };
    const before = await Promise.all(engines.map(predicted));

    // Six overlapping requests through node-1, and two through node-2.
    const replies = await Promise.all([
      ...Array.from({ length: 6 }, () => chat(n1, modelId, 24)),
      chat(n2, modelId, 24),
      chat(n2, modelId, 24),
    ]);
    expect(replies.map((r) => r.status)).toEqual(Array(8).fill(200));
    const served = new Map<string, number>();
    for (const r of replies) {
      const id = r.headers.get("x-instance-id")!;
      served.set(id, (served.get(id) ?? 0) + 1);
    }
    const after = await Promise.all(engines.map(predicted));
    const split = `${JSON.stringify(Object.fromEntries(served))}, tokens ${engines.map((e, k) => `${e.host}: ${after[k]! - before[k]!}`).join(", ")}`;
    // Both instances served, about evenly: each got at least a quarter of the requests.
    for (const [k, e] of engines.entries()) {
      expect(
        served.get(e.id) ?? 0,
        `requests routed to ${e.host} (${split})`,
      ).toBeGreaterThanOrEqual(2);
      expect(
        after[k]! - before[k]!,
        `tokens generated on ${e.host} (${split})`,
      ).toBeGreaterThanOrEqual(48);
    }
  });
});
