// The APIs beyond OpenAI chat (Responses, Anthropic Messages, their token counters, rerank) against
// a scripted engine: each goes to the engine's same path on an instance of its kind, with its own
// schema, id, default bound, stream dialect and error envelope.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { AnthropicErrorBodySchema } from "@ic/protocol";
import type { ChatEvent, ChatRequestSeen, InstanceKind } from "@ic/protocol";
import { silentLogger } from "@ic/log";
import { createGatewayApp } from "../app.ts";
import { close, closers, cluster, engine, errorOf, listen, MODEL } from "../testing/scripted.ts";
import type { ChatLimits } from "./chat.ts";

afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

const ENGINE_MSG_ID = `chatcmpl-${"m".repeat(32)}`;
const ENGINE_RESP_ID = `resp_${"r".repeat(32)}`;

/** The gateway over real HTTP, with MODEL on one instance of `kind` at `endpoint`; what it observed. */
async function gateway(
  endpoint: string,
  kind?: InstanceKind,
  o: { mmproj?: boolean; chat?: Partial<ChatLimits> } = {},
) {
  const seen: ChatRequestSeen[] = [];
  const events: ChatEvent[] = [];
  const app = createGatewayApp({
    cluster: cluster(endpoint, { ...(kind ? { kind } : {}), ...(o.mmproj ? { mmproj: true } : {}) })
      .view,
    log: silentLogger(),
    name: "t",
    ...(o.chat ? { chat: o.chat } : {}),
    observeChat: (r) => {
      seen.push(r);
      return { event: (e) => events.push(e) };
    },
  });
  const base = await listen(app);
  const post = async (path: string, body: unknown) => {
    const r = await fetch(`${base}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { status: r.status, text: await r.text(), headers: r.headers };
  };
  return { post, seen, events };
}

const sse = (event: string, data: unknown) => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

function anthropicErrorOf(text: string) {
  return AnthropicErrorBodySchema.parse(JSON.parse(text)).error;
}

describe("Anthropic Messages", () => {
  const ask = { model: MODEL, max_tokens: 8, messages: [{ role: "user", content: "hi" }] };

  it("answers the engine's message with the command id, and refuses a bad body in Anthropic's envelope", async () => {
    const paths: string[] = [];
    const e = await engine((req, res) => {
      paths.push(req.url ?? "");
      res.setHeader("content-type", "application/json");
      res.end(
        JSON.stringify({
          id: ENGINE_MSG_ID,
          type: "message",
          role: "assistant",
          content: [{ type: "text", text: "hello" }],
          usage: { input_tokens: 5, output_tokens: 2, cache_read_input_tokens: 3 },
        }),
      );
    });
    const g = await gateway(e.url);
    const r = await g.post("/v1/messages", ask);
    expect(r.status).toBe(200);
    const json = JSON.parse(r.text) as { id: string; content: unknown };
    expect(json.id).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(json.id).toBe(r.headers.get("x-command-id"));
    expect(json.content).toEqual([{ type: "text", text: "hello" }]);
    expect(paths).toEqual(["/v1/messages"]);
    // Nothing added: max_tokens is the client's (required).
    expect(e.bodies[0]).toEqual(ask);
    expect(g.seen[0]!.path).toBe("/v1/messages");
    // Anthropic's usage, in OpenAI's words for metrics: cached input counts as prompt.
    expect(g.events.find((x) => x.type === "engine")).toMatchObject({
      usage: { prompt_tokens: 8, completion_tokens: 2 },
    });
    const bad = await g.post("/v1/messages", { model: MODEL, messages: ask.messages });
    expect(bad.status).toBe(400);
    expect(anthropicErrorOf(bad.text)).toMatchObject({
      type: "invalid_request_error",
      code: "invalid_request",
      message: expect.stringContaining("max_tokens"),
    });
    const wrongRole = await g.post("/v1/messages", {
      ...ask,
      messages: [{ role: "system", content: "x" }],
    });
    expect(wrongRole.status).toBe(400);
    expect(paths).toHaveLength(1);
    // An unknown model is a 404 in the same envelope.
    const missing = await g.post("/v1/messages", { ...ask, model: "org/none" });
    expect(missing.status).toBe(404);
    expect(anthropicErrorOf(missing.text)).toMatchObject({ type: "not_found_error" });
  });

  it("relays a stream's events, ends one the engine fails with Anthropic's error event, and reads its usage", async () => {
    let fail = false;
    const e = await engine((_q, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(
        sse("message_start", {
          type: "message_start",
          message: { id: ENGINE_MSG_ID, usage: { input_tokens: 4, output_tokens: 0 } },
        }),
      );
      res.write(
        sse("content_block_delta", {
          type: "content_block_delta",
          index: 0,
          delta: { type: "text_delta", text: "he" },
        }),
      );
      if (fail) {
        res.end(sse("error", { code: 500, message: "llama_decode failed", type: "server_error" }));
        return;
      }
      res.write(
        sse("message_delta", { type: "message_delta", delta: {}, usage: { output_tokens: 2 } }),
      );
      res.end(sse("message_stop", { type: "message_stop" }));
    });
    const g = await gateway(e.url);
    const ok = await g.post("/v1/messages", { ...ask, stream: true });
    expect(ok.status).toBe(200);
    const id = ok.headers.get("x-command-id")!;
    expect(ok.text).toContain(`"id":"${id}"`);
    expect(ok.text).not.toContain(ENGINE_MSG_ID);
    expect(ok.text.endsWith(sse("message_stop", { type: "message_stop" }))).toBe(true);
    expect(g.events.find((x) => x.type === "engine")).toMatchObject({
      usage: { prompt_tokens: 4, completion_tokens: 2 },
    });
    fail = true;
    const broken = await g.post("/v1/messages", { ...ask, stream: true });
    expect(broken.status).toBe(200);
    const last = broken.text.trimEnd().split("\n\n").at(-1)!;
    expect(last.startsWith("event: error\ndata: ")).toBe(true);
    expect(anthropicErrorOf(last.slice("event: error\ndata: ".length))).toMatchObject({
      type: "api_error",
      code: "upstream_failed",
      message: expect.stringContaining("llama_decode failed"),
    });
    // The events before the failure reached the client whole.
    expect(broken.text).toContain('"text":"he"');
  });

  it("count_tokens: the engine's count as it is, no id, no bound added", async () => {
    const e = await engine((_q, res) => res.end(JSON.stringify({ input_tokens: 21 })));
    const g = await gateway(e.url);
    const body = { model: MODEL, messages: ask.messages, system: "Be brief." };
    const r = await g.post("/v1/messages/count_tokens", body);
    expect(r.status).toBe(200);
    expect(JSON.parse(r.text)).toEqual({ input_tokens: 21 });
    expect(e.bodies[0]).toEqual(body);
    // A count is no work done: no usage reported.
    expect(g.events.some((x) => x.type === "engine")).toBe(false);
  });
});

describe("OpenAI Responses", () => {
  it("fills max_output_tokens, rewrites the response id in place, and ends a failed stream with the error data event", async () => {
    let fail = false;
    const e = await engine((_q, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      const created = { type: "response.created", response: { id: ENGINE_RESP_ID } };
      res.write(sse("response.created", created));
      if (fail) {
        res.end(`data: ${JSON.stringify({ error: { code: 500, message: "boom" } })}\n\n`);
        return;
      }
      res.end(
        sse("response.completed", {
          type: "response.completed",
          response: { id: ENGINE_RESP_ID, usage: { input_tokens: 6, output_tokens: 3 } },
          timings: { prompt_n: 6, predicted_n: 3, predicted_ms: 3 },
        }),
      );
    });
    const g = await gateway(e.url);
    const r = await g.post("/v1/responses", { model: MODEL, input: "hi", stream: true });
    expect(r.status).toBe(200);
    expect(e.bodies[0]).toMatchObject({ max_output_tokens: 2048 });
    const id = r.headers.get("x-command-id")!;
    expect(id).toMatch(/^resp_[0-9a-f]{32}$/);
    expect(r.text.split(`"id":"${id}"`)).toHaveLength(3);
    expect(g.events.find((x) => x.type === "engine")).toMatchObject({
      usage: { prompt_tokens: 6, completion_tokens: 3 },
    });
    fail = true;
    const broken = await g.post("/v1/responses", { model: MODEL, input: "hi", stream: true });
    const last = broken.text.trimEnd().split("\n\n").at(-1)!;
    expect(errorOf(last.slice("data: ".length))).toMatchObject({ code: "upstream_failed" });
    // Its own schema, in OpenAI's envelope.
    const bad = await g.post("/v1/responses", { model: MODEL, input: [{ content: "x" }] });
    expect(bad.status).toBe(400);
    expect(errorOf(bad.text).message).toContain("type or a role");
  });
});

describe("rerank", () => {
  const ask = { model: MODEL, query: "q", documents: ["a", "b"] };

  it("goes to a rerank instance under each of llama-server's names, answered as it is", async () => {
    const paths: string[] = [];
    const answer = { results: [{ index: 1, relevance_score: 0.5 }], usage: { prompt_tokens: 4 } };
    const e = await engine((req, res) => {
      paths.push(req.url ?? "");
      res.end(JSON.stringify(answer));
    });
    const g = await gateway(e.url, "rerank");
    for (const path of ["/v1/rerank", "/v1/reranking", "/rerank", "/reranking"]) {
      const r = await g.post(path, ask);
      expect(r.status, path).toBe(200);
      expect(JSON.parse(r.text)).toEqual(answer);
    }
    expect(paths).toEqual(["/v1/rerank", "/v1/reranking", "/rerank", "/reranking"]);
    // Chat is not served by a rerank instance; neither is a body without documents.
    const chat = await g.post("/v1/chat/completions", {
      model: MODEL,
      messages: [{ role: "user", content: "hi" }],
    });
    expect(chat.status).toBe(400);
    const none = await g.post("/v1/rerank", { model: MODEL, query: "q" });
    expect(none.status).toBe(400);
    expect(errorOf(none.text).message).toContain("send documents");
  });

  it("without a rerank instance: a 400 that says what to place", async () => {
    const e = await engine((_q, res) => res.end("{}"));
    const g = await gateway(e.url);
    const r = await g.post("/v1/rerank", ask);
    expect(r.status).toBe(400);
    expect(errorOf(r.text).message).toBe(
      `/v1/rerank needs a rerank instance of ${MODEL}; its ready instances are generate: place one with "kind": "rerank" (ic place ${MODEL} --kind rerank)`,
    );
    expect(e.bodies).toHaveLength(0);
  });
});

describe("images given by URL", () => {
  const PNG = Buffer.from(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
    "base64",
  );
  /** A web server with an image at /cat.png and a page at /page. */
  async function images() {
    const server = createServer((req, res) => {
      if (req.url === "/cat.png") res.writeHead(200, { "content-type": "image/png" }).end(PNG);
      else res.writeHead(200, { "content-type": "text/html" }).end("<html></html>");
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    closers.push(() => close(server));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }
  const ask = (url: string) => ({
    model: MODEL,
    max_tokens: 4,
    messages: [
      {
        role: "user",
        content: [
          { type: "text", text: "what is this?" },
          { type: "image_url", image_url: { url } },
        ],
      },
    ],
  });

  it("are fetched by the gateway and sent inline when chat.fetch_image_urls is on; the engine never gets the URL", async () => {
    const site = await images();
    const e = await engine((_q, res) => res.end(JSON.stringify({ id: "x", choices: [] })));
    const g = await gateway(e.url, undefined, {
      mmproj: true,
      chat: { fetch_image_urls: true, image_url_hosts: ["127.0.0.1"] },
    });
    const r = await g.post("/v1/chat/completions", ask(`${site}/cat.png`));
    expect(r.status).toBe(200);
    const sent = JSON.stringify(e.bodies[0]);
    expect(sent).toContain(`data:image/png;base64,${PNG.toString("base64")}`);
    expect(sent).not.toContain(site);
    // Anthropic's URL source becomes its base64 source.
    await g.post("/v1/messages", {
      model: MODEL,
      max_tokens: 4,
      messages: [
        {
          role: "user",
          content: [{ type: "image", source: { type: "url", url: `${site}/cat.png` } }],
        },
      ],
    });
    expect(e.bodies[1]).toMatchObject({
      messages: [
        {
          content: [
            {
              type: "image",
              source: { type: "base64", media_type: "image/png", data: PNG.toString("base64") },
            },
          ],
        },
      ],
    });
    // Not an image, another host, another scheme: refused, nothing sent.
    for (const [url, words] of [
      [`${site}/page`, "is not an image"],
      ["http://example.invalid/cat.png", "are not fetched (chat.image_url_hosts"],
      ["file:///etc/passwd", "not file:"],
    ] as const) {
      const bad = await g.post("/v1/chat/completions", ask(url));
      expect(bad.status, url).toBe(400);
      expect(errorOf(bad.text).message).toContain(words);
    }
    expect(e.bodies).toHaveLength(2);
  });

  it("are refused by default, saying to send the image inline; a data: URL passes as it is", async () => {
    const e = await engine((_q, res) => res.end(JSON.stringify({ id: "x", choices: [] })));
    const g = await gateway(e.url, undefined, { mmproj: true });
    const r = await g.post("/v1/chat/completions", ask("https://example.com/cat.png"));
    expect(r.status).toBe(400);
    expect(errorOf(r.text).message).toContain("chat.fetch_image_urls is off");
    const inline = `data:image/png;base64,${PNG.toString("base64")}`;
    expect((await g.post("/v1/chat/completions", ask(inline))).status).toBe(200);
    expect(JSON.stringify(e.bodies[0])).toContain(inline);
  });
});
