// Chaos: a streaming client's own gateway dies (kill -9 of node-1's whole process group, the master
// too) while the engine producing its answer runs on node-3; the client reads the rest through
// node-2 (the documented helper, GET /v1/stream from its last event id) and the text it ends with
// is the text of the same request answered without the kill.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resumableStream } from "@ic/cli";
import type { ResumableStreamOptions } from "@ic/cli";
import {
  placeAndWait,
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { HostCluster } from "@ic/testkit";

interface StateDoc {
  node_identities: { node_id: string; name: string }[];
}

let cluster: HostCluster;
let modelId = "";

beforeAll(async () => {
  const store = mkdtempSync(join(tmpdir(), "ic-resume-store-"));
  // The slow model: a few hundred tokens a second, so a kill lands mid-stream.
  ({ modelId } = await seedStore(store, { modelId: "test/slow-llama", slow: true }));
  cluster = await startHostCluster(3, {
    config: (i) => ({ ...(i === 1 ? { store_path: store } : {}), engine: { context_size: 4096 } }),
  });
  await waitForConvergence(cluster.nodes, 3);
  const doc = await cluster.node("node-2").get<StateDoc>("/state");
  const id = (name: string) => doc.node_identities.find((n) => n.name === name)!.node_id;
  await placeAndWait(cluster.node("node-2"), {
    model_id: modelId,
    excluded_nodes: [id("node-1"), id("node-2")],
  });
}, 240_000);

afterAll(async () => {
  await cluster?.[Symbol.asyncDispose]();
});

/** The answer's text, read through `nodes`; `onEvent` sees the count of events read so far. */
async function answer(
  o: Omit<ResumableStreamOptions, "path" | "body" | "headers">,
  onEvent: (n: number) => void = () => {},
): Promise<string> {
  let text = "";
  let n = 0;
  for await (const e of resumableStream({
    ...o,
    path: "/v1/chat/completions",
    headers: { authorization: `Bearer ${cluster.adminToken}` },
    body: {
      model: modelId,
      messages: [{ role: "user", content: "Tell me a long story about the sea." }],
      max_tokens: 400,
      temperature: 0,
      // Every run computes the whole prompt: a prompt read from the cache takes other arithmetic
      // (one token at a time), and this model's near-ties then tip another way.
      cache_prompt: false,
    },
  })) {
    if (e.data === "[DONE]") continue;
    const j = JSON.parse(e.data) as { choices?: { delta?: { content?: string } }[] };
    text += j.choices?.[0]?.delta?.content ?? "";
    onEvent(++n);
  }
  return text;
}

/** Waits until the gateway at `apiUrl` answers a one-token request for the model. */
async function waitForRoute(apiUrl: string): Promise<void> {
  await waitFor(
    async () => {
      const r = await fetch(`${apiUrl}/v1/chat/completions`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${cluster.adminToken}`,
          "content-type": "application/json",
        },
        body: JSON.stringify({
          model: modelId,
          messages: [{ role: "user", content: "hi" }],
          max_tokens: 1,
        }),
      }).catch(() => undefined);
      await r?.body?.cancel();
      return r?.ok ? true : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 200, what: `${apiUrl} routes ${modelId}` },
  );
}

describe("a stream whose gateway dies", () => {
  it("is read to its end through another node, the same text as without the kill", async () => {
    const node1 = cluster.node("node-1");
    const node2 = cluster.node("node-2");
    const nodes = [node1.apiUrl, node2.apiUrl];
    const whole = await answer({ nodes });
    expect(whole.length).toBeGreaterThan(200);

    for (const killAfter of [30, 1]) {
      let killedAt = 0;
      let resumedAt = 0;
      let firstAfter = 0;
      const resumes: { node: string; from: number }[] = [];
      const text = await answer(
        {
          nodes,
          conversationId: `chaos-${killAfter}`,
          onResume: (r) => {
            resumes.push(r);
            resumedAt = Date.now();
          },
        },
        (n) => {
          if (n === killAfter) {
            killedAt = Date.now();
            node1.kill("SIGKILL");
          }
          if (resumedAt && !firstAfter) firstAfter = Date.now();
        },
      );
      expect(text).toBe(whole);
      expect(resumes).toHaveLength(1);
      expect(resumes[0]!.node).toBe(node2.apiUrl);
      expect(resumes[0]!.from).toBeGreaterThan(0);
      expect(firstAfter).toBeGreaterThan(0);
      process.stdout.write(
        `killed after ${killAfter} events: first resumed token ${firstAfter - killedAt} ms after the kill\n`,
      );
      if (killAfter === 1) continue; // the last round: no next round needs node-1 back
      // node-1 back for the next round, and routing: a restarted gateway knows the instance only
      // once the new master's state reaches it (until then the model is a 404 there).
      await node1.start();
      await waitForConvergence(cluster.nodes, 3);
      await waitForRoute(node1.apiUrl);
    }
  });

  it("another token, or an id nobody started, reads nothing", async () => {
    const node2 = cluster.node("node-2");
    const r = await fetch(`${node2.apiUrl}/v1/stream?conversation_id=chaos-30`, {
      headers: { authorization: `Bearer ${cluster.adminToken}` },
    });
    // It ended: its engine still keeps it (5 minutes), so the same token reads it whole.
    expect(r.status).toBe(200);
    expect((await r.text()).endsWith("data: [DONE]\n\n")).toBe(true);
    const none = await fetch(`${node2.apiUrl}/v1/stream?conversation_id=never-started`, {
      headers: { authorization: `Bearer ${cluster.adminToken}` },
    });
    expect(none.status).toBe(404);
  });
});
