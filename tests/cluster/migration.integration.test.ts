// Stream migration with real processes: two replicas of the slow model on a 2-node cluster; a stream
// that opted in (`x-ic-migrate: 1`) loses its llama-server (kill -9) mid-generation and goes on to
// [DONE] on the other replica, in the same SSE stream, as one completion.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  enginePidOf,
  seedStore,
  startCluster,
  waitFor,
  waitForConvergence,
  waitForReadyInstances,
} from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

interface StateDoc {
  models: { model_id: string }[];
  instances: {
    instance_id: string;
    runners: { rank: number; state: string; endpoint?: string }[];
  }[];
  this_node: { tasks_open: number };
}

interface Chunk {
  id: string;
  created: number;
  model: string;
  choices: { delta?: { content?: string | null }; finish_reason?: string | null }[];
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  x_ic?: { migrated_from?: string };
  error?: { code: string; message: string };
}

/** The kill comes at the fifth text event: the continuation generates the rest (~295 tokens). */
const MAX_TOKENS = 300;

/** The value of the first sample of `name` in Prometheus text whose labels hold all of `labels`. */
function sample(text: string, name: string, labels: readonly string[]): number | undefined {
  const line = text
    .split("\n")
    .find((l) => l.startsWith(`${name}{`) && labels.every((x) => l.includes(x)));
  return line === undefined ? undefined : Number(line.split(" ").at(-1));
}

describe("stream migration", () => {
  it("a stream whose llama-server is killed goes on to [DONE] on the other replica: same id, x_ic.migrated_from, usage of both parts", async () => {
    const store = mkdtempSync(join(tmpdir(), "ic-store-"));
    // The slow (wider) model on one thread: a stream lasts long enough to kill its engine mid-way.
    const { modelId } = await seedStore(store, { slow: true });
    await using cluster = await startCluster(2, {
      config: (i) => ({
        ...(i === 0 ? { store_path: store } : {}),
        engine: { context_size: 4096, extra_args: ["-t", "1"] },
      }),
    });
    const [n1] = cluster.nodes as [NodeProcess, NodeProcess];
    await waitForConvergence(cluster.nodes, 2);
    await waitFor(
      async () =>
        (await n1.get<StateDoc>("/state")).models.some((m) => m.model_id === modelId)
          ? true
          : undefined,
      { timeoutMs: 20_000, what: "the model registered" },
    );
    const placed = await n1.post("/place_instance", { model_id: modelId, replicas: 2 });
    expect(placed.status, await placed.clone().text()).toBe(200);
    const state = await waitForReadyInstances<StateDoc>(n1, 2, 60_000);

    const res = await fetch(`${n1.apiUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-ic-migrate": "1", ...n1.authHeaders },
      body: JSON.stringify({
        model: modelId,
        messages: [{ role: "user", content: "Write a very long story" }],
        max_tokens: MAX_TOKENS,
        ignore_eos: true,
        temperature: 0,
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    expect(res.status).toBe(200);
    const lost = res.headers.get("x-instance-id")!;
    const endpoint = state.instances
      .find((i) => i.instance_id === lost)!
      .runners.find((r) => r.rank === 0)!.endpoint!;

    // Read events; after the fifth with text, kill -9 the engine serving the stream.
    const chunks: { at: number; data: string }[] = [];
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let carry = "";
    let killedAt: number | undefined;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      carry += decoder.decode(value, { stream: true });
      const parts = carry.split("\n\n");
      carry = parts.pop()!;
      const now = performance.now();
      // An event of the first part carries its engine offset (`id:`, resumable streams) first.
      for (const p of parts)
        chunks.push({ at: now, data: p.replace(/^id: \d+\n/, "").slice("data: ".length) });
      if (
        killedAt === undefined &&
        chunks.filter((c) => c.data.includes('"content":"')).length >= 5
      ) {
        process.kill(enginePidOf(new URL(endpoint).port, new URL(endpoint).hostname), "SIGKILL");
        killedAt = performance.now();
      }
    }
    expect(killedAt, "the engine was killed mid-stream").toBeDefined();
    expect(chunks.at(-1)?.data).toBe("[DONE]");
    const events = chunks.slice(0, -1).map((c) => JSON.parse(c.data) as Chunk);
    expect(events.filter((e) => e.error)).toEqual([]);
    // One completion: one id and model throughout. llama-server stamps each chunk with its own
    // clock's second (a stream that crosses a second boundary changes `created` itself), so the
    // first part's events may run a second or two ahead; the continuation's carry the first's.
    const first = events[0]!;
    expect(first.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/);
    const streamS = Math.ceil((chunks.at(-1)!.at - chunks[0]!.at) / 1000) + 1;
    for (const e of events) {
      expect({ id: e.id, model: e.model }).toEqual({ id: first.id, model: first.model });
      expect(e.created).toBeGreaterThanOrEqual(first.created);
      expect(e.created).toBeLessThanOrEqual(first.created + streamS);
    }
    // The final event is the continuation's: it names the lost instance, carries the first
    // answer's `created`, and counts the tokens of both parts.
    const last = events.at(-1)!;
    expect(last.x_ic).toEqual({ migrated_from: lost });
    expect(last.created).toBe(first.created);
    const before = chunks.filter((c) => c.at <= killedAt! && c.data.includes('"content":"')).length;
    const textEvents = events.filter((e) => (e.choices[0]?.delta?.content ?? "") !== "").length;
    expect(textEvents).toBeGreaterThan(before);
    expect(last.usage!.completion_tokens).toBeGreaterThanOrEqual(textEvents);
    expect(last.usage!.completion_tokens).toBeLessThanOrEqual(MAX_TOKENS + 10);
    expect(events.some((e) => e.choices[0]?.finish_reason === "length")).toBe(true);

    // The pause the client saw: its longest wait for an event in the first second after the kill
    // (later gaps are the engine's own pace on a busy machine).
    let gapMs = 0;
    for (let i = 1; i < chunks.length; i++) {
      const at = chunks[i]!.at;
      if (at > killedAt! && at < killedAt! + 1000) gapMs = Math.max(gapMs, at - chunks[i - 1]!.at);
    }
    const metrics = await (await fetch(`${n1.apiUrl}/metrics`, { headers: n1.authHeaders })).text();
    const model = `model="${modelId}"`;
    const migrated = sample(metrics, "ic_chat_migrations_total", [model, 'outcome="migrated"']);
    const seconds = sample(metrics, "ic_chat_migration_seconds_sum", [model]);
    expect(migrated).toBe(1);
    expect(seconds).toBeGreaterThan(0);
    // The measurement, in the test's output (tests log no other way: no console).
    process.stdout.write(
      `stream migration: ${Math.round(seconds! * 1000)} ms from the loss to the continuation's first event (gateway), ` +
        `the client's longest wait for an event in the second after the kill ${Math.round(gapMs)} ms; ${before} text events before the kill, ` +
        `${textEvents} in all, usage ${JSON.stringify(last.usage)}\n`,
    );
    // The lost try's task was failed and the continuation's finished: none stays open.
    await expect
      .poll(async () => (await n1.get<StateDoc>("/state")).this_node.tasks_open, {
        timeout: 10_000,
      })
      .toBe(0);
  }, 120_000);
});
