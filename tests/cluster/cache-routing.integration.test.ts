// Routing on the prompt caches (chat.prefix_routing "cache") across two gateways on two hosts, with
// real engines: conversations begun through one gateway while a replica is busy go to the other one;
// their next turns, sent through the other gateway once both are idle, go to the same replica (that
// gateway knows where the first turns went only from the bus's `ic.prompts`; its own ranking would
// send about half of them elsewhere), and the engine reports the history reused (`timings.cache_n`).
// Both gateways count their predictions against the engine's counts.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
  waitForReadyInstances,
} from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

interface StateDoc {
  models: { model_id: string }[];
  instances: { instance_id: string; outstanding: number }[];
}
interface Answer {
  choices: { message: { content: string } }[];
  timings: { cache_n: number; prompt_n: number };
}

const words = "river stone lantern orchard harbor meadow signal copper window garden".split(" ");
const text = (seed: number, n: number) => {
  let s = "";
  for (let i = 0; s.length < n; i++) s += `${words[(seed * 7 + i * 3) % words.length]} `;
  return s.slice(0, n);
};

async function ask(node: NodeProcess, model: string, messages: unknown[], maxTokens = 8) {
  const r = await node.post("/v1/chat/completions", {
    model,
    messages,
    max_tokens: maxTokens,
    temperature: 0,
    ...(maxTokens > 8 ? { ignore_eos: true } : {}),
  });
  const body = await r.text();
  expect(r.status, body).toBe(200);
  return { instance: r.headers.get("x-instance-id")!, answer: JSON.parse(body) as Answer };
}

/** Sum of a metric's samples for one instance in a node's /metrics. */
async function metric(node: NodeProcess, name: string, instance: string): Promise<number> {
  const res = await fetch(`${node.apiUrl}/metrics`, { headers: node.authHeaders });
  const line = (await res.text())
    .split("\n")
    .find((l) => l.startsWith(`${name}{`) && l.includes(`ic_instance="${instance}"`));
  return line ? Number(line.split(" ").at(-1)) : 0;
}

describe("routing on the prompt caches across gateways", () => {
  it("sends a conversation's next turn, through the other gateway, to the replica holding it", async () => {
    const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-cache-routing-")), {
      modelId: "cache/wide",
      slow: true,
    });
    await using cluster = await startHostCluster(2, {
      config: (i) => ({
        chat: { prefix_routing: "cache" },
        cluster: { heartbeat_ms: 500 },
        engine: { context_size: 8192, extra_args: ["-np", "2", "-t", "1"] },
        ...(i === 0 ? { store_path: store } : {}),
      }),
    });
    const [n1, n2] = cluster.nodes as [NodeProcess, NodeProcess];
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
    await waitForReadyInstances(n1, 2, 60_000);

    // A long answer of another conversation keeps one replica busy while four conversations begin
    // through node-1: each goes to the other one (the shorter queue), whatever its hash ranks first.
    const stop = new AbortController();
    const busy = fetch(`${n1.apiUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...n1.authHeaders },
      body: JSON.stringify({
        model: modelId,
        messages: [{ role: "user", content: `Tell a story. ${text(9, 300)}` }],
        max_tokens: 3000,
        ignore_eos: true,
        stream: true,
      }),
      signal: stop.signal,
    });
    await waitFor(
      async () =>
        (await n1.get<StateDoc>("/state")).instances.some((i) => i.outstanding >= 1)
          ? true
          : undefined,
      { timeoutMs: 10_000, what: "the long answer in flight" },
    );
    const conversations = [0, 1, 2, 3].map((c) => [
      { role: "system", content: "You are a careful assistant." },
      { role: "user", content: `Conversation ${c}. Summarize this: ${text(c, 1200)}` },
    ]);
    const firsts = [];
    for (const messages of conversations) firsts.push(await ask(n1, modelId, messages));
    const homes = new Set(firsts.map((f) => f.instance));
    expect(homes.size).toBe(1);
    const busyInstance = (await busy).headers.get("x-instance-id")!;
    expect(homes.has(busyInstance)).toBe(false);
    stop.abort();
    await waitFor(
      async () =>
        (await n2.get<StateDoc>("/state")).instances.every((i) => i.outstanding === 0)
          ? true
          : undefined,
      { timeoutMs: 10_000, what: "node-2 sees both replicas idle" },
    );

    // Their second turns through node-2, which has routed none of them and now sees both replicas
    // idle: each goes home (known from node-1's notices), where the engine reuses its history.
    for (const [c, messages] of conversations.entries()) {
      const first = firsts[c]!;
      messages.push(
        { role: "assistant", content: first.answer.choices[0]!.message.content },
        { role: "user", content: "And in one sentence?" },
      );
      const second = await ask(n2, modelId, messages);
      expect(second.instance, `conversation ${c}`).toBe(first.instance);
      const firstPrompt = first.answer.timings.cache_n + first.answer.timings.prompt_n;
      expect(second.answer.timings.cache_n, `conversation ${c}`).toBeGreaterThan(0.9 * firstPrompt);
    }
    const home = [...homes][0]!;

    // Each gateway checked its predictions against the engine's counts for the requests it sent.
    expect(await metric(n1, "ic_prompt_cache_requests_total", home)).toBe(4);
    expect(await metric(n2, "ic_prompt_cache_requests_total", home)).toBe(4);
    const predicted = await metric(n2, "ic_prompt_cache_predicted_tokens_total", home);
    const cached = await metric(n2, "ic_prompt_cache_cached_tokens_total", home);
    expect(predicted).toBeGreaterThan(0.5 * cached);
    expect(predicted).toBeLessThan(1.5 * cached);
  });
});
