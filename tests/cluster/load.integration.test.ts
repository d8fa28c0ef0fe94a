// Heartbeats do not starve behind request work: a 3-host cluster whose engines keep both CPU cores
// busy with streaming requests for a while, under liveness timings tighter than the defaults. No
// healthy node may be declared lost, every request must succeed, and every node's event-loop delay
// (reported in its heartbeats) must stay far below the liveness timeout: typically under a quarter
// of it, and never above half (a single stall of ~0.5 s was seen once in CI on a 2-core runner with
// three nodes, three engines and the test runner sharing the cores).
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { placeAndWait, seedStore, startHostCluster, waitForConvergence } from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

const TIMINGS = { heartbeat_ms: 500, liveness_timeout_ms: 2000, election_timeout_ms: 1500 };
const LOAD_MS = 12_000;
const CLIENTS_PER_NODE = 4;

interface StateDoc {
  node_identities: { node_id: string; name: string }[];
  topology: { nodes: { name: string; loop_delay: { max_ms: number } | null }[] };
}

describe("control plane under request load", () => {
  it("keeps every node a member while engines saturate the CPUs, with small event-loop delay", async () => {
    const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-load-store-")), {
      modelId: "load/slow",
      slow: true,
    });
    await using cluster = await startHostCluster(3, {
      config: (i) => ({
        cluster: TIMINGS,
        engine: { context_size: 16384, extra_args: ["-np", "4"] },
        ...(i === 0 ? { store_path: store } : {}),
      }),
    });
    const nodes = cluster.nodes as NodeProcess[];
    await waitForConvergence(nodes, 3);
    const doc = await nodes[0]!.get<StateDoc>("/state");
    // One instance per node, so every host runs an engine.
    await Promise.all(
      nodes.map((n) => {
        const others = doc.node_identities
          .filter((x) => x.name !== n.spec.name)
          .map((x) => x.node_id);
        return placeAndWait(nodes[0]!, { model_id: modelId, min_nodes: 1, excluded_nodes: others });
      }),
    );
    const seqBefore = await lastSeq(nodes[0]!);

    const until = Date.now() + LOAD_MS;
    // The per-heartbeat event-loop delays each node reports while the load runs.
    const samples = new Map<string, number[]>();
    const watch = setInterval(() => {
      void nodes[0]!.get<StateDoc>("/state").then(
        (d) => {
          for (const x of d.topology.nodes)
            if (x.loop_delay)
              samples.set(x.name, [...(samples.get(x.name) ?? []), x.loop_delay.max_ms]);
        },
        () => {},
      );
    }, TIMINGS.heartbeat_ms);
    let completed = 0;
    const failures: { text: string; typed: boolean }[] = [];
    const client = (n: NodeProcess) =>
      new OpenAI({ baseURL: `${n.apiUrl}/v1`, apiKey: n.spec.apiToken!, maxRetries: 0 });
    await Promise.all(
      nodes.flatMap((n) =>
        Array.from({ length: CLIENTS_PER_NODE }, async () => {
          const c = client(n);
          while (Date.now() < until) {
            try {
              const stream = await c.chat.completions.create({
                model: modelId,
                messages: [{ role: "user", content: "Tell me about the sea." }],
                max_tokens: 64,
                stream: true,
              });
              for await (const _ of stream);
              completed += 1;
            } catch (e) {
              // Only a typed, retryable error may end a request (see the note at the assertion).
              const err =
                e instanceof OpenAI.APIError ? (e.error as { retryable?: boolean }) : null;
              failures.push({ text: String(e), typed: err?.retryable === true });
            }
          }
        }),
      ),
    );

    clearInterval(watch);
    // Under full saturation llama-server now and then resets a connection before it answers (seen
    // in 2 of about 10 runs, once per run); the gateway then answers 500 instance_lost, retryable.
    // That is the documented end of such a request; anything untyped, or more than a stray one, fails.
    expect(failures.filter((f) => !f.typed)).toEqual([]);
    expect(failures.length).toBeLessThanOrEqual(Math.max(1, Math.floor(completed / 20)));
    expect(completed).toBeGreaterThan(0);
    const left = await events(nodes[0]!, seqBefore, "NodeLeft");
    expect(left, "no node was declared lost under load").toEqual([]);
    const after = await nodes[0]!.get<StateDoc>("/state");
    expect(after.node_identities).toHaveLength(3);
    const summary = [...samples].map(([name, xs]) => {
      const sorted = [...xs].sort((a, b) => a - b);
      return { name, median: sorted[Math.floor(sorted.length / 2)]!, worst: sorted.at(-1)! };
    });
    process.stderr.write(
      `load: ${completed} streams; per node, heartbeat-period event-loop delay under load (ms): ${JSON.stringify(summary)}\n`,
    );
    expect(summary).toHaveLength(3);
    for (const { name, median, worst } of summary) {
      expect(median, `${name} median event-loop delay under load`).toBeLessThan(
        TIMINGS.liveness_timeout_ms / 4,
      );
      expect(worst, `${name} worst event-loop delay under load`).toBeLessThan(
        TIMINGS.liveness_timeout_ms / 2,
      );
    }
  });
});

async function lastSeq(n: NodeProcess): Promise<number> {
  const r = await n.get<{ records: { seq: number }[] }>("/events?limit=1");
  return r.records.at(-1)?.seq ?? 0;
}

async function events(n: NodeProcess, afterSeq: number, type: string): Promise<unknown[]> {
  const r = await n.get<{ records: unknown[] }>(`/events?after_seq=${afterSeq}&type=${type}`);
  return r.records;
}
