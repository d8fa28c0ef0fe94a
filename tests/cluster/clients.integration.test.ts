// The clients people use, against the cluster as deployed and against llama-server itself: the
// official `openai` client (chat, completions, embeddings, Responses; streaming and tools) and
// `@anthropic-ai/sdk` (messages, streaming, tools, count_tokens) ask node-1 of three hosts (TLS
// between them, bearer tokens; the instances run on the other hosts), then ask the very engines that
// answered, directly with their own keys. At temperature 0 the answers are the same apart from ids
// and timings. The model is the tiny tools model: its template offers tools and it answers with a
// real tool call, which llama-server parses; the round trip sends the call's result back.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  engineKeyOf,
  placeAndWait,
  seedStore,
  startHostCluster,
  waitForConvergence,
} from "@ic/testkit";
import type { HostCluster } from "@ic/testkit";

interface StateDoc {
  node_identities: { node_id: string; name: string }[];
  instances: { instance_id: string; runners: { rank: number; endpoint?: string }[] }[];
}

let cluster: HostCluster;
let modelId = "";
/** The generating instance's engine: its URL (by address) and its key. */
const direct = { url: "", key: "" };

/** An instance's rank-0 engine, by its host's address (its certificate names both), and its key. */
async function engineOf(instanceId: string): Promise<{ url: string; key: string }> {
  const s = await cluster.node("node-1").get<StateDoc>("/state");
  const endpoint = new URL(
    s.instances.find((i) => i.instance_id === instanceId)!.runners.find((r) => r.rank === 0)!
      .endpoint!,
  );
  const address = cluster.lab.host(endpoint.hostname).address;
  return {
    url: `https://${address}:${endpoint.port}`,
    key: engineKeyOf(endpoint.port, address),
  };
}

const openai = (baseURL: string, apiKey: string) => new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const anthropic = (baseURL: string, apiKey: string) =>
  new Anthropic({ baseURL, apiKey, maxRetries: 0 });

/** The cluster's client and the engine's, for one SDK. */
function pair<T>(make: (base: string, key: string) => T, suffix = ""): { g: T; d: T } {
  return {
    g: make(`${cluster.node("node-1").apiUrl}${suffix}`, cluster.adminToken),
    d: make(`${direct.url}${suffix}`, direct.key),
  };
}

/** Keys whose values differ by design: ids (the gateway's command id; random call ids), times. */
const DIFFERENT = new Set([
  "id",
  "call_id",
  "item_id",
  "tool_call_id",
  "tool_use_id",
  "created",
  "created_at",
  "completed_at",
  "timings",
  "system_fingerprint",
  "model",
]);

/**
 * What two answers must agree on: all but the DIFFERENT keys, with usage counted whole (what the
 * prompt cache held differs between two asks of the same engine: OpenAI's cached_tokens, and
 * Anthropic's input_tokens, which leaves cache reads out).
 */
function comparable(x: unknown): unknown {
  if (Array.isArray(x)) return x.map(comparable);
  if (typeof x !== "object" || x === null) return x;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(x)) {
    if (DIFFERENT.has(k)) continue;
    out[k] = k === "usage" ? wholeUsage(v) : comparable(v);
  }
  return out;
}

function wholeUsage(u: unknown): unknown {
  if (typeof u !== "object" || u === null) return u;
  const {
    prompt_tokens_details: _p,
    input_tokens_details: _i,
    cache_read_input_tokens: cached,
    input_tokens,
    ...rest
  } = u as Record<string, unknown>;
  return {
    ...rest,
    ...(input_tokens === undefined
      ? {}
      : { input_tokens: Number(input_tokens) + Number(cached ?? 0) }),
  };
}

const WEATHER = {
  name: "get_weather",
  description: "the weather in a city",
  parameters: {
    type: "object" as const,
    properties: { city: { type: "string", enum: ["Paris", "Oslo"] } },
    required: ["city"],
  },
};

beforeAll(async () => {
  const store = mkdtempSync(join(tmpdir(), "ic-clients-store-"));
  ({ modelId } = await seedStore(store, { tools: true, mmproj: true }));
  cluster = await startHostCluster(3, {
    // Room for the tools prompt (~500 tokens) in each of the engine's slots.
    config: (i) => ({ ...(i === 0 ? { store_path: store } : {}), engine: { context_size: 8192 } }),
  });
  await waitForConvergence(cluster.nodes, 3);
  const doc = await cluster.node("node-1").get<StateDoc>("/state");
  const node1 = doc.node_identities.find((n) => n.name === "node-1")!.node_id;
  // Off node-1: every answer crosses the hosts' links, over TLS.
  const placed = await placeAndWait(cluster.node("node-1"), {
    model_id: modelId,
    excluded_nodes: [node1],
  });
  Object.assign(direct, await engineOf(placed.instance_id));
}, 240_000);

afterAll(async () => {
  await cluster?.[Symbol.asyncDispose]();
});

describe("openai", () => {
  it("chat, streamed and not, and a tool call's round trip: the engine's answers", async () => {
    const { g, d } = pair(openai, "/v1");
    const ask = {
      model: modelId,
      messages: [{ role: "user" as const, content: "What is the weather?" }],
      max_tokens: 24,
      temperature: 0,
    };
    const [gc, dc] = [await g.chat.completions.create(ask), await d.chat.completions.create(ask)];
    expect(gc.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/);
    expect(comparable(gc.choices)).toEqual(comparable(dc.choices));
    expect(comparable({ usage: gc.usage })).toEqual(comparable({ usage: dc.usage }));
    const tools = [{ type: "function" as const, function: WEATHER }];
    const withTools = { ...ask, max_tokens: 64, tools, parallel_tool_calls: false };
    const [gt, dt] = [
      await g.chat.completions.create(withTools),
      await d.chat.completions.create(withTools),
    ];
    const call = gt.choices[0]!.message.tool_calls?.[0];
    expect(call).toMatchObject({ type: "function", function: { name: "get_weather" } });
    expect(JSON.parse((call as { function: { arguments: string } }).function.arguments)).toEqual({
      city: expect.stringMatching(/^(Paris|Oslo)$/),
    });
    expect(comparable(gt.choices)).toEqual(comparable(dt.choices));
    // Streamed: the same call, in deltas that pass through unchanged.
    const streamed = async (c: OpenAI) => {
      const deltas: unknown[] = [];
      for await (const chunk of await c.chat.completions.create({ ...withTools, stream: true }))
        deltas.push(chunk.choices[0]?.delta);
      return deltas;
    };
    const [gs, ds] = [await streamed(g), await streamed(d)];
    expect(comparable(gs)).toEqual(comparable(ds));
    expect(JSON.stringify(gs)).toContain("get_weather");
    // The round trip: the call and its result go back; the engine answers from them.
    const back = {
      ...withTools,
      messages: [
        ...ask.messages,
        { role: "assistant" as const, content: null, tool_calls: [call!] },
        { role: "tool" as const, tool_call_id: call!.id, content: '{"temperature_c": 21}' },
      ],
    };
    const [gb, db] = [await g.chat.completions.create(back), await d.chat.completions.create(back)];
    expect(gb.usage!.prompt_tokens).toBeGreaterThan(gt.usage!.prompt_tokens);
    expect(comparable(gb.choices)).toEqual(comparable(db.choices));
  });

  it("completions and Responses, streamed and not, with tools", async () => {
    const { g, d } = pair(openai, "/v1");
    const text = { model: modelId, prompt: "Once upon a time", max_tokens: 12, temperature: 0 };
    const [gt, dt] = [await g.completions.create(text), await d.completions.create(text)];
    expect(gt.choices[0]!.text).toBe(dt.choices[0]!.text);
    let streamedText = "";
    for await (const chunk of await g.completions.create({ ...text, stream: true }))
      streamedText += chunk.choices[0]?.text ?? "";
    expect(streamedText).toBe(dt.choices[0]!.text);

    const ask = {
      model: modelId,
      input: "Tell me a story.",
      max_output_tokens: 16,
      temperature: 0,
    };
    const [gr, dr] = [await g.responses.create(ask), await d.responses.create(ask)];
    expect(gr.id).toMatch(/^resp_[0-9a-f]{32}$/);
    expect(gr.output_text).toBe(dr.output_text);
    expect(comparable(gr.output)).toEqual(comparable(dr.output));
    expect(gr.usage).toMatchObject({
      input_tokens: dr.usage!.input_tokens,
      output_tokens: dr.usage!.output_tokens,
    });
    const tools = [{ type: "function" as const, strict: false, ...WEATHER }];
    const withTools = { ...ask, max_output_tokens: 64, tools, parallel_tool_calls: false };
    const events = async (c: OpenAI) => {
      const out: { type: string }[] = [];
      for await (const e of await c.responses.create({ ...withTools, stream: true })) out.push(e);
      return out;
    };
    const [ge, de] = [await events(g), await events(d)];
    expect(ge.map((e) => e.type)).toEqual(de.map((e) => e.type));
    expect(comparable(ge)).toEqual(comparable(de));
    const done = ge.find((e) => e.type === "response.completed") as unknown as {
      response: { id: string; output: { type: string; name?: string }[] };
    };
    expect(done.response.id).toMatch(/^resp_[0-9a-f]{32}$/);
    expect(done.response.output.find((o) => o.type === "function_call")).toMatchObject({
      name: "get_weather",
    });
    const counted = await fetch(`${cluster.node("node-1").apiUrl}/v1/responses/input_tokens`, {
      method: "POST",
      headers: { ...cluster.node("node-1").authHeaders, "content-type": "application/json" },
      body: JSON.stringify({ model: modelId, input: ask.input }),
    });
    expect(counted.status).toBe(200);
    expect(((await counted.json()) as { input_tokens: number }).input_tokens).toBe(
      dr.usage!.input_tokens,
    );
  });

  it("embeddings from an embed instance, the engine's vectors", async () => {
    const placed = await placeAndWait(cluster.node("node-1"), { model_id: modelId, kind: "embed" });
    const engine = await engineOf(placed.instance_id);
    const g = openai(`${cluster.node("node-1").apiUrl}/v1`, cluster.adminToken);
    const d = openai(`${engine.url}/v1`, engine.key);
    const ask = { model: modelId, input: ["hello there", "general kenobi"] };
    const { data, response } = await g.embeddings.create(ask).withResponse();
    expect(response.headers.get("x-instance-id")).toBe(placed.instance_id);
    expect(data.data.map((x) => x.embedding)).toEqual(
      (await d.embeddings.create(ask)).data.map((x) => x.embedding),
    );
  });
});

describe("@anthropic-ai/sdk", () => {
  const ask = {
    model: "",
    max_tokens: 24,
    temperature: 0,
    system: "You are brief.",
    messages: [{ role: "user" as const, content: "What is the weather?" }],
  };

  it("messages, streamed and not, with tools and a tool result; count_tokens", async () => {
    const { g, d } = pair(anthropic);
    const body = { ...ask, model: modelId };
    const [gm, dm] = [await g.messages.create(body), await d.messages.create(body)];
    expect(gm.id).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(comparable(gm.content)).toEqual(comparable(dm.content));
    expect(gm.usage.output_tokens).toBe(dm.usage.output_tokens);
    expect(gm.stop_reason).toBe(dm.stop_reason);
    const tools = [
      { name: WEATHER.name, description: WEATHER.description, input_schema: WEATHER.parameters },
    ];
    const withTools = { ...body, max_tokens: 64, tools, tool_choice: { type: "any" as const } };
    const [gt, dt] = [await g.messages.create(withTools), await d.messages.create(withTools)];
    const use = gt.content.find((b) => b.type === "tool_use");
    expect(use).toMatchObject({ type: "tool_use", name: "get_weather" });
    expect(comparable(gt.content)).toEqual(comparable(dt.content));
    // Streamed: the same events (the SDK's own parser; its final message is the same).
    const streamed = async (c: Anthropic) => {
      const events: unknown[] = [];
      const s = c.messages.stream(withTools);
      for await (const e of s) events.push(e);
      return { events, final: await s.finalMessage() };
    };
    const [gs, ds] = [await streamed(g), await streamed(d)];
    expect(comparable(gs.events)).toEqual(comparable(ds.events));
    expect(comparable(gs.final.content)).toEqual(comparable(gt.content));
    // The round trip: the tool's result goes back.
    const toolUse = use as { type: "tool_use"; id: string; name: string; input: unknown };
    const back = {
      ...withTools,
      messages: [
        ...ask.messages,
        { role: "assistant" as const, content: [toolUse] },
        {
          role: "user" as const,
          content: [
            {
              type: "tool_result" as const,
              tool_use_id: toolUse.id,
              content: '{"temperature_c": 21}',
            },
          ],
        },
      ],
    };
    const [gb, db] = [await g.messages.create(back), await d.messages.create(back)];
    expect(gb.usage.input_tokens + (gb.usage.cache_read_input_tokens ?? 0)).toBeGreaterThan(
      gt.usage.input_tokens,
    );
    expect(comparable(gb.content)).toEqual(comparable(db.content));
    const [gc, dc] = [
      await g.messages.countTokens({
        model: modelId,
        messages: body.messages,
        system: body.system,
      }),
      await d.messages.countTokens({
        model: modelId,
        messages: body.messages,
        system: body.system,
      }),
    ];
    expect(gc.input_tokens).toBe(dc.input_tokens);
  });

  it("a mistake is an error the SDK reads: Anthropic's envelope, the type its classes key on", async () => {
    const { g } = pair(anthropic);
    const err = await g.messages.create({ ...ask, model: "org/none" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.NotFoundError);
    expect((err as { error: unknown }).error).toMatchObject({
      type: "error",
      error: { type: "not_found_error", code: "model_not_found" },
    });
    const unauth = anthropic(cluster.node("node-1").apiUrl, "not-a-token-at-all");
    await expect(unauth.messages.create({ ...ask, model: modelId })).rejects.toBeInstanceOf(
      Anthropic.AuthenticationError,
    );
  });
});

describe("images", () => {
  // A 1x1 PNG; the projector resizes any image.
  const PNG =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

  it("reach the model's projector through chat and Messages: the engine's answers; a URL is refused by default", async () => {
    const { g, d } = pair(openai, "/v1");
    const ask = {
      model: modelId,
      max_tokens: 12,
      temperature: 0,
      messages: [
        {
          role: "user" as const,
          content: [
            { type: "text" as const, text: "What is in the picture?" },
            { type: "image_url" as const, image_url: { url: `data:image/png;base64,${PNG}` } },
          ],
        },
      ],
    };
    const [gc, dc] = [await g.chat.completions.create(ask), await d.chat.completions.create(ask)];
    expect(comparable(gc.choices)).toEqual(comparable(dc.choices));
    // The projector's tokens are in the prompt: more than the text alone.
    const text = await d.chat.completions.create({
      ...ask,
      messages: [{ role: "user", content: "What is in the picture?" }],
    });
    expect(gc.usage!.prompt_tokens).toBeGreaterThan(text.usage!.prompt_tokens);
    const a = pair(anthropic);
    const block = {
      model: modelId,
      max_tokens: 12,
      temperature: 0,
      messages: [
        {
          role: "user" as const,
          content: [
            { type: "text" as const, text: "What is in the picture?" },
            {
              type: "image" as const,
              source: { type: "base64" as const, media_type: "image/png" as const, data: PNG },
            },
          ],
        },
      ],
    };
    const [ga, da] = [await a.g.messages.create(block), await a.d.messages.create(block)];
    expect(comparable(ga.content)).toEqual(comparable(da.content));
    const url = await g.chat.completions
      .create({
        ...ask,
        messages: [
          {
            role: "user",
            content: [{ type: "image_url", image_url: { url: "https://example.com/cat.png" } }],
          },
        ],
      })
      .catch((e: unknown) => e);
    expect(url).toMatchObject({ status: 400, error: { code: "invalid_request" } });
    const models = await g.models.list();
    expect(models.data.find((m) => m.id === modelId)).toMatchObject({
      capabilities: expect.arrayContaining(["vision", "tools"]),
    });
  });
});

describe("rerank", () => {
  it("is a 400 that says what to place until a rerank instance serves it; then the engine's scores in its order", async () => {
    const node = cluster.node("node-1");
    const ask = {
      model: modelId,
      query: "hello",
      documents: ["hello world", "the cat", "and so on", "hello"],
      top_n: 4,
    };
    const post = (url: string, headers: Record<string, string>, path = "/v1/rerank") =>
      fetch(`${url}${path}`, {
        method: "POST",
        headers: { ...headers, "content-type": "application/json" },
        body: JSON.stringify(ask),
      });
    const refused = await post(node.apiUrl, node.authHeaders);
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: { message: string } }).error.message).toContain(
      `place one with "kind": "rerank" (ic place ${modelId} --kind rerank)`,
    );
    const placed = await placeAndWait(node, { model_id: modelId, kind: "rerank" });
    const engine = await engineOf(placed.instance_id);
    // This llama-server's first answer to a query can differ from its later ones (scores swapped
    // between documents: seen on a fresh engine, asked directly, too); both are asked warm.
    const warm = await post(engine.url, { authorization: `Bearer ${engine.key}` });
    expect(warm.status).toBe(200);
    const got = await post(node.apiUrl, node.authHeaders);
    expect(got.status).toBe(200);
    expect(got.headers.get("x-instance-id")).toBe(placed.instance_id);
    const want = (await (
      await post(engine.url, { authorization: `Bearer ${engine.key}` })
    ).json()) as { results: { index: number; relevance_score: number }[] };
    const answer = (await got.json()) as typeof want;
    expect(answer.results).toEqual(want.results);
    expect(answer.results).toHaveLength(4);
    // llama-server's other name for it, outside /v1, is served too (with the same token).
    const alias = await post(node.apiUrl, node.authHeaders, "/rerank");
    expect(((await alias.json()) as typeof want).results).toEqual(want.results);
    // GET /v1/models shows both kinds.
    const models = (await (
      await fetch(`${node.apiUrl}/v1/models`, { headers: node.authHeaders })
    ).json()) as { data: { id: string; kinds: string[]; capabilities: string[] }[] };
    expect(models.data.find((m) => m.id === modelId)).toMatchObject({
      kinds: expect.arrayContaining(["generate", "rerank"]),
      capabilities: expect.arrayContaining(["completion", "tools", "rerank"]),
    });
  });
});
