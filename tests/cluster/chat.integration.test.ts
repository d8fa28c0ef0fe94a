import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  engineKeyOf,
  placeAndWait,
  seedStore,
  startCluster,
  waitForConvergence,
} from "@ic/testkit";
import type { LocalCluster } from "@ic/testkit";

let cluster: LocalCluster;
let modelId: string;
/** A wider model that streams a few hundred tokens per second: long enough to disconnect mid-stream. */
const slowModelId = "test/slow-llama";

beforeAll(async () => {
  const store = mkdtempSync(join(tmpdir(), "ic-store-"));
  ({ modelId } = await seedStore(store));
  await seedStore(store, { modelId: slowModelId, slow: true });
  // An 8192-token context (the testkit default is 512), so an abandoned request can be given far more
  // tokens than the engine generates before it notices: 7500 take several seconds even on a fast CPU.
  cluster = await startCluster(1, {
    config: () => ({ store_path: store, engine: { context_size: 8192 } }),
  });
  await waitForConvergence(cluster.nodes, 1);
  await placeAndWait(cluster.nodes[0]!, { model_id: modelId, min_nodes: 1 });
  await placeAndWait(cluster.nodes[0]!, { model_id: slowModelId, min_nodes: 1 });
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

  it("text completions through the official client, streaming and not, the same text at temperature 0; models.retrieve", async () => {
    const client = new OpenAI({ baseURL: `${cluster.nodes[0]!.apiUrl}/v1`, apiKey: "unused" });
    const ask = { model: modelId, prompt: "Once upon a time", max_tokens: 8, temperature: 0 };
    const { data, response } = await client.completions.create(ask).withResponse();
    expect(data.id).toMatch(/^cmpl-[0-9a-f]{32}$/);
    expect(data.choices[0]!.text.length).toBeGreaterThan(0);
    expect(data.usage?.completion_tokens).toBe(8);
    expect(response.headers.get("x-task-id")).toMatch(/^t-/);
    const stream = await client.completions.create({ ...ask, stream: true });
    let text = "";
    const ids = new Set<string>();
    for await (const chunk of stream) {
      ids.add(chunk.id);
      text += chunk.choices[0]?.text ?? "";
    }
    expect(text).toBe(data.choices[0]!.text);
    expect([...ids]).toEqual([expect.stringMatching(/^cmpl-/)]);
    const model = await client.models.retrieve(modelId);
    expect(model).toMatchObject({ id: modelId, object: "model" });
    await expect(client.models.retrieve("test/none")).rejects.toMatchObject({ status: 404 });
  });

  it("embeddings through the official client from an instance placed for them, the same vectors as the engine's own; chat stays on the chat instance", async () => {
    const node = cluster.nodes[0]!;
    const placed = await placeAndWait(node, { model_id: modelId, min_nodes: 1, embeddings: true });
    const client = new OpenAI({ baseURL: `${node.apiUrl}/v1`, apiKey: "unused" });
    const { data, response } = await client.embeddings
      .create({ model: modelId, input: ["hello there", "general kenobi"] })
      .withResponse();
    expect(response.headers.get("x-instance-id")).toBe(placed.instance_id);
    expect(data.object).toBe("list");
    expect(data.data.map((d) => d.index)).toEqual([0, 1]);
    // The tiny model's hidden size, pooled (mean) into one vector per input.
    for (const d of data.data) expect(d.embedding).toHaveLength(64);
    expect(data.usage.prompt_tokens).toBeGreaterThan(0);
    // Differential: the engine asked directly gives the same vectors.
    const s = await node.get<{
      instances: { instance_id: string; runners: { rank: number; endpoint?: string }[] }[];
    }>("/state");
    const endpoint = s.instances
      .find((i) => i.instance_id === placed.instance_id)!
      .runners.find((r) => r.rank === 0)!.endpoint!;
    const key = engineKeyOf(new URL(endpoint).port, new URL(endpoint).hostname);
    const direct = (await (
      await fetch(`${endpoint}/v1/embeddings`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({ model: modelId, input: ["hello there", "general kenobi"] }),
      })
    ).json()) as { data: { embedding: number[] }[] };
    expect(data.data.map((d) => d.embedding)).toEqual(direct.data.map((d) => d.embedding));
    // base64: little-endian float32, the same vector.
    const b64 = await client.embeddings.create({
      model: modelId,
      input: "hello there",
      encoding_format: "base64",
    });
    const raw = Buffer.from(b64.data[0]!.embedding as unknown as string, "base64");
    const floats = Array.from(new Float32Array(raw.buffer, raw.byteOffset, raw.length / 4));
    expect(floats).toHaveLength(64);
    floats.forEach((x, i) => expect(x).toBeCloseTo(data.data[0]!.embedding[i]!, 5));
    // Chat keeps going to the chat instance, not to the embedding one.
    const chat = await client.chat.completions
      .create({ model: modelId, messages: [{ role: "user", content: "hi" }], max_tokens: 2 })
      .withResponse();
    expect(chat.response.headers.get("x-instance-id")).not.toBe(placed.instance_id);
    expect(
      (await fetch(`${node.apiUrl}/instance/${placed.instance_id}`, { method: "DELETE" })).status,
    ).toBe(200);
  });

  it("differential: the official client gets the same answers through the gateway as from llama-server asked directly", async () => {
    const node = cluster.nodes[0]!;
    const s = await node.get<{
      instances: {
        instance_id: string;
        model_id: string;
        embeddings?: boolean;
        runners: { rank: number; endpoint?: string }[];
      }[];
    }>("/state");
    const inst = s.instances.find((i) => i.model_id === modelId && !i.embeddings)!;
    const endpoint = inst.runners.find((r) => r.rank === 0)!.endpoint!;
    const key = engineKeyOf(new URL(endpoint).port, new URL(endpoint).hostname);
    const gateway = new OpenAI({ baseURL: `${node.apiUrl}/v1`, apiKey: "unused" });
    const direct = new OpenAI({ baseURL: `${endpoint}/v1`, apiKey: key });
    const chat = {
      model: modelId,
      messages: [{ role: "user" as const, content: "tell me a story" }],
      max_tokens: 12,
      temperature: 0,
    };
    const [g, d] = [
      await gateway.chat.completions.create(chat),
      await direct.chat.completions.create(chat),
    ];
    expect(g.choices[0]!.message.content).toBe(d.choices[0]!.message.content);
    expect(g.usage).toMatchObject({
      prompt_tokens: d.usage!.prompt_tokens,
      completion_tokens: d.usage!.completion_tokens,
    });
    const text = { model: modelId, prompt: "Once upon a time", max_tokens: 12, temperature: 0 };
    const [gt, dt] = [
      await gateway.completions.create(text),
      await direct.completions.create(text),
    ];
    expect(gt.choices[0]!.text).toBe(dt.choices[0]!.text);
    // Streamed through the gateway: the same text as the engine's own answer.
    let streamed = "";
    for await (const chunk of await gateway.completions.create({ ...text, stream: true }))
      streamed += chunk.choices[0]?.text ?? "";
    expect(streamed).toBe(dt.choices[0]!.text);
    // models.retrieve: the engine serves its alias (the model id); the gateway the same id.
    expect((await gateway.models.retrieve(modelId)).id).toBe(modelId);
    expect((await direct.models.list()).data.map((m) => m.id)).toContain(modelId);
  });

  it("a 2-token completion works as the health checklist uses it", async () => {
    const r = await cluster.nodes[0]!.post("/v1/chat/completions", {
      model: modelId,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 2,
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
      headers: { "content-type": "application/json", ...cluster.nodes[0]!.authHeaders },
      body: '{"model": 3}',
    });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe("invalid_request");
    const notJson = await fetch(`${cluster.nodes[0]!.apiUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...cluster.nodes[0]!.authHeaders },
      body: "{nope",
    });
    expect(notJson.status).toBe(400);
    // A body that is not declared JSON never reaches the parser.
    const plain = await fetch(`${cluster.nodes[0]!.apiUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "text/plain", ...cluster.nodes[0]!.authHeaders },
      body: '{"model":"x","messages":[]}',
    });
    expect(plain.status).toBe(415);
    expect(((await plain.json()) as { error: { code: string } }).error.code).toBe(
      "unsupported_media_type",
    );
    // A body over 64 MiB is refused: declared up front, or counted while it streams in (chunked).
    const mib = Buffer.alloc(1024 * 1024, 0x20);
    const declared = await fetch(`${cluster.nodes[0]!.apiUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...cluster.nodes[0]!.authHeaders },
      body: Buffer.concat(Array.from({ length: 65 }, () => mib)),
    });
    expect(declared.status).toBe(400);
    let sent = 0;
    const chunked = await fetch(`${cluster.nodes[0]!.apiUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...cluster.nodes[0]!.authHeaders },
      body: new ReadableStream<Uint8Array>({
        pull: (ctl) => (sent++ < 70 ? ctl.enqueue(mib) : ctl.close()),
      }),
      duplex: "half",
    } as RequestInit);
    expect(chunked.status).toBe(400);
    expect(((await chunked.json()) as { error: { message: string } }).error.message).toMatch(
      /larger than 64 MiB/,
    );
  });

  it("a client that disconnects mid-stream cancels the generation in llama-server", async () => {
    const state = await cluster.nodes[0]!.get<{
      instances: {
        instance_id: string;
        model_id: string;
        runners: { rank: number; endpoint?: string }[];
      }[];
    }>("/state");
    const instance = state.instances.find((i) => i.model_id === slowModelId)!;
    const endpoint = instance.runners.find((r) => r.rank === 0)!.endpoint!;
    // Only gateways talk to engines: the test reads the engine's key off its process.
    const key = engineKeyOf(new URL(endpoint).port, new URL(endpoint).hostname);
    expect((await fetch(`${endpoint}/metrics`)).status).toBe(401);
    const metric = async (name: string): Promise<number> => {
      const text = await (
        await fetch(`${endpoint}/metrics`, { headers: { authorization: `Bearer ${key}` } })
      ).text();
      const line = text.split("\n").find((l) => l.startsWith(`llamacpp:${name} `));
      return Number(line!.split(" ")[1]);
    };
    const predictedBefore = await metric("tokens_predicted_total");
    const abort = new AbortController();
    const res = await cluster.nodes[0]!.post(
      "/v1/chat/completions",
      {
        model: slowModelId,
        messages: [{ role: "user", content: "Write a very long story" }],
        max_tokens: 1500,
        ignore_eos: true,
        stream: true,
      },
      { signal: abort.signal },
    );
    const reader = res.body!.getReader();
    await reader.read();
    await reader.read();
    expect(await metric("requests_processing")).toBe(1);
    abort.abort();
    // The gateway cancels the engine's stream (DELETE /v1/stream: a stream with a conversation id
    // outlives its connection, for a resume) and the engine stops the slot at its next token: the
    // request counted a few hundred of the 1500 at most (the cancel is one more request to it).
    const deadline = Date.now() + 5000;
    while ((await metric("requests_processing")) !== 0) {
      expect(Date.now()).toBeLessThan(deadline);
      await new Promise((r) => setTimeout(r, 20));
    }
    const predicted = (await metric("tokens_predicted_total")) - predictedBefore;
    expect(predicted).toBeLessThan(400);
    // The task ends on the gateway too (and with it the master's table entry).
    await expect
      .poll(
        async () =>
          (await cluster.nodes[0]!.get<{ this_node: { tasks_open: number } }>("/state")).this_node
            .tasks_open,
      )
      .toBe(0);

    // The same for a non-streaming request abandoned while the engine generates. llama-server checks
    // a waiting non-streaming request's connection after a quiet second (every result restarts that
    // wait, /metrics polls included), so the test leaves the engine alone for 1.5 s after the abort:
    // by then it has stopped after about a second of generation (~1100 tokens on a 2-core VM),
    // well short of the 7500 asked for (an unaborted request would still be running).
    const before2 = await metric("tokens_predicted_total");
    const abort2 = new AbortController();
    const pending = cluster.nodes[0]!.post(
      "/v1/chat/completions",
      {
        model: slowModelId,
        messages: [{ role: "user", content: "Write a very long story" }],
        max_tokens: 7500,
        ignore_eos: true,
      },
      { signal: abort2.signal },
    );
    pending.catch(() => {});
    await new Promise((r) => setTimeout(r, 300));
    abort2.abort();
    await new Promise((r) => setTimeout(r, 1500));
    expect(await metric("requests_processing")).toBe(0);
    expect((await metric("tokens_predicted_total")) - before2).toBeLessThan(5000);
  });

  it("lists the served model in /v1/models and the instance in /state", async () => {
    const m = await cluster.nodes[0]!.get<{ data: { id: string }[] }>("/v1/models");
    expect(m.data.map((x) => x.id)).toContain(modelId);
  });
});
