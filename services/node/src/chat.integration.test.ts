import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { placeAndWait, seedStore, startCluster, waitForConvergence } from "@ic/testkit";
import type { LocalCluster } from "@ic/testkit";

let cluster: LocalCluster;
let modelId: string;

beforeAll(async () => {
  const store = mkdtempSync(join(tmpdir(), "ic-store-"));
  ({ modelId } = await seedStore(store));
  cluster = await startCluster(1, { config: () => ({ store_path: store }) });
  await waitForConvergence(cluster.nodes, 1);
  await placeAndWait(cluster.nodes[0]!, { model_id: modelId, min_nodes: 1 });
});
afterAll(async () => {
  await cluster?.[Symbol.asyncDispose]();
});

describe("chat completions on a 1-node cluster", () => {
  it("answers a non-streaming request through the official OpenAI client, with the command id and a task id", async () => {
    const client = new OpenAI({ baseURL: `${cluster.nodes[0]!.apiUrl}/v1`, apiKey: "unused" });
    const { data, response } = await client.chat.completions
      .create({ model: modelId, messages: [{ role: "user", content: "Hello" }], max_tokens: 8 })
      .withResponse();
    expect(data.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/);
    expect(data.choices[0]!.message.content?.length).toBeGreaterThan(0);
    expect(data.usage?.completion_tokens).toBe(8);
    const taskId = response.headers.get("x-task-id");
    expect(taskId).toMatch(/^t-/);
    expect(taskId).not.toBe(data.id);
  });

  it("streams chunks and ends with [DONE]", async () => {
    const client = new OpenAI({ baseURL: `${cluster.nodes[0]!.apiUrl}/v1`, apiKey: "unused" });
    const stream = await client.chat.completions.create({
      model: modelId,
      messages: [{ role: "user", content: "Tell me" }],
      max_tokens: 12,
      stream: true,
    });
    let text = "";
    let chunks = 0;
    const ids = new Set<string>();
    for await (const chunk of stream) {
      chunks++;
      ids.add(chunk.id);
      text += chunk.choices[0]?.delta?.content ?? "";
    }
    expect(chunks).toBeGreaterThan(3);
    expect(text.length).toBeGreaterThan(0);
    expect([...ids]).toHaveLength(1);
    expect([...ids][0]).toMatch(/^chatcmpl-/);
  });

  it("a 2-token completion works as the health checklist uses it", async () => {
    const r = await fetch(`${cluster.nodes[0]!.apiUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: modelId,
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 2,
      }),
    });
    expect(r.status).toBe(200);
    const body = (await r.json()) as { usage: { completion_tokens: number } };
    expect(body.usage.completion_tokens).toBe(2);
  });

  it("404 with a typed error for an unknown model, 400 for a malformed body", async () => {
    const client = new OpenAI({
      baseURL: `${cluster.nodes[0]!.apiUrl}/v1`,
      apiKey: "unused",
      maxRetries: 0,
    });
    await expect(
      client.chat.completions.create({
        model: "nobody/here",
        messages: [{ role: "user", content: "x" }],
        max_tokens: 2,
      }),
    ).rejects.toMatchObject({
      status: 404,
      error: { code: "model_not_found" },
    });
    const bad = await fetch(`${cluster.nodes[0]!.apiUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"model": 3}',
    });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe("invalid_request");
    const notJson = await fetch(`${cluster.nodes[0]!.apiUrl}/v1/chat/completions`, {
      method: "POST",
      body: "{nope",
    });
    expect(notJson.status).toBe(400);
  });

  it("lists the served model in /v1/models and the instance in /state", async () => {
    const m = await cluster.nodes[0]!.get<{ data: { id: string }[] }>("/v1/models");
    expect(m.data.map((x) => x.id)).toContain(modelId);
  });
});
