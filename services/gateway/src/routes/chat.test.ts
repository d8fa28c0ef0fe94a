// The chat path's failure semantics against a scripted engine (a real HTTP server whose answers each
// test writes) and a scripted cluster view whose events each test emits: statuses, SSE framing,
// engine error mapping, bounded waits, the default max_tokens, and the TaskFailed race.
import { createServer } from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { ErrorBodySchema, ServiceError } from "@ic/protocol";
import { nodeIdFor } from "@ic/state";
import type { Command, InstanceId, SessionId, TaskId } from "@ic/protocol";
import { silentLogger } from "@ic/log";
import { createGatewayApp } from "../app.ts";
import type { GatewayOptions } from "../app.ts";
import type { ClusterView } from "@ic/protocol";
import type { ChatEvent, ChatObserver } from "@ic/protocol";
import type { ChatLimits } from "./chat.ts";
import type { MigrationReport } from "../migration.ts";
import {
  close,
  closers,
  cluster,
  engine,
  errorOf,
  INSTANCE,
  listen,
  MODEL,
  S,
  twoInstances,
} from "../testing/scripted.ts";

afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

/** The gateway served over real HTTP (streams take the Node response path, as deployed). */
async function gateway(
  view: ClusterView,
  limits: Partial<ChatLimits> = {},
  observeChat?: () => ChatObserver | undefined,
  extra: Partial<GatewayOptions> = {},
) {
  const app = createGatewayApp({
    cluster: view,
    log: silentLogger(),
    name: "t",
    // The tests here count on which instance is tried first (the least loaded, then the oldest);
    // prefix routing has its own tests below.
    chat: { prefix_routing: "off", ...limits },
    ...(observeChat ? { observeChat } : {}),
    ...extra,
  });
  const base = await listen(app);
  return async (body: Record<string, unknown>, headers: Record<string, string> = {}) => {
    const t0 = Date.now();
    const r = await fetch(`${base}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }], ...body }),
    });
    const text = await r.text();
    return { status: r.status, text, ms: Date.now() - t0, type: r.headers.get("content-type") };
  };
}

/**
 * The events of an SSE body; every `data:` payload must be valid JSON or [DONE]. An engine's events
 * carry `id: <its byte offset after them>` (resumable streams): increasing, and dropped here.
 */
function events(text: string): unknown[] {
  expect(text.endsWith("\n\n"), `stream ends at an event boundary: ${JSON.stringify(text)}`).toBe(
    true,
  );
  let lastId = 0;
  return text
    .split("\n\n")
    .filter((e) => e.length > 0)
    .map((e) => {
      const id = /^id: (\d+)\n/.exec(e);
      if (id) {
        expect(Number(id[1])).toBeGreaterThan(lastId);
        lastId = Number(id[1]);
        e = e.slice(id[0].length);
      }
      expect(e.startsWith("data: "), `event: ${e}`).toBe(true);
      const data = e.slice(6);
      return data === "[DONE]" ? data : (JSON.parse(data) as unknown);
    });
}

const chunk = (id: string, content: string) =>
  `data: {"choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}}}],"id":"${id}","object":"chat.completion.chunk"}\n\n`;
const ENGINE_ID = `chatcmpl-${"x".repeat(32)}`;

describe("non-streaming failures", () => {
  it("an engine that dies before answering (connection reset) is 500 instance_lost, retryable", async () => {
    const e = await engine((req) => req.socket.destroy());
    const r = await (await gateway(cluster(e.url).view))({});
    expect(r.status).toBe(500);
    expect(errorOf(r.text)).toMatchObject({ code: "instance_lost", retryable: true });
  });

  it("an engine that is gone (connection refused) is 500 instance_lost", async () => {
    const e = await engine(() => {});
    await close(e.server);
    const r = await (await gateway(cluster(e.url).view))({});
    expect(r.status).toBe(500);
    expect(errorOf(r.text)).toMatchObject({ code: "instance_lost", retryable: true });
  });

  it("TaskFailed that overtakes the CreateTask reply still ends the request (no hang)", async () => {
    const e = await engine(() => {}); // never answers
    const c = cluster(e.url, { taskFailedFirst: true });
    const r = await (await gateway(c.view, { total_timeout_ms: 20_000 }))({});
    expect(r.status).toBe(500);
    expect(errorOf(r.text)).toMatchObject({ code: "task_failed", retryable: true });
    expect(r.ms).toBeLessThan(5000);
  });

  it("the instance's node leaving ends a request whose task was never failed", async () => {
    const e = await engine(() => {});
    const c = cluster(e.url);
    const send = await gateway(c.view, { total_timeout_ms: 20_000 });
    setTimeout(
      () => c.emit({ type: "NodeLeft", node_id: nodeIdFor(S, "p-0"), reason: "heartbeat timeout" }),
      200,
    );
    const r = await send({});
    expect(r.status).toBe(500);
    expect(errorOf(r.text).code).toBe("task_failed");
  });

  it("an engine that never answers ends with 504 upstream_timeout after the total bound", async () => {
    const e = await engine(() => {});
    const r = await (await gateway(cluster(e.url).view, { total_timeout_ms: 300 }))({});
    expect(r.status).toBe(504);
    expect(errorOf(r.text)).toMatchObject({ code: "upstream_timeout", retryable: true });
  });
});

describe("client mistakes are 400 invalid_request, not retryable", () => {
  const llamaErr = (code: number, message: string, type = "server_error") =>
    JSON.stringify({ error: { code, message, type } });

  it.each([
    [
      500,
      "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj",
    ],
    [500, 'Failed to parse tools: Missing tool function: {"type":"function"}'],
    [
      500,
      "[json.exception.parse_error.101] parse error at line 1, column 61: syntax error while parsing value - invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF",
    ],
    [
      400,
      "request (2020 tokens) exceeds the available context size (256 tokens), try increasing it",
    ],
  ])("engine %i '%s' becomes 400 invalid_request in the envelope", async (status, message) => {
    const e = await engine((_q, res) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(llamaErr(status, message));
    });
    for (const stream of [false, true]) {
      const r = await (await gateway(cluster(e.url).view))({ stream });
      expect(r.status).toBe(400);
      expect(errorOf(r.text)).toMatchObject({
        code: "invalid_request",
        retryable: false,
        type: "invalid_request_error",
      });
      expect(errorOf(r.text).message).toContain(message.slice(0, 30));
    }
  });

  it("the engine's own 5xx (not a request problem) stays 502 upstream_failed, retryable", async () => {
    const e = await engine((_q, res) => {
      res.writeHead(500, { "content-type": "application/json" });
      res.end(llamaErr(500, "llama_decode failed: out of memory"));
    });
    const r = await (await gateway(cluster(e.url).view))({});
    expect(r.status).toBe(502);
    expect(errorOf(r.text)).toMatchObject({ code: "upstream_failed", retryable: true });
  });

  it("lone surrogates, malformed tools and images for a text-only model never reach the engine", async () => {
    const e = await engine((_q, res) => res.end("{}"));
    const send = await gateway(cluster(e.url).view);
    const cases: Record<string, unknown>[] = [
      { messages: [{ role: "user", content: "hi \ud800 there" }] },
      { messages: [{ role: "user", content: "hi" }], tools: [{ type: "function" }] },
      { messages: [{ role: "user", content: "hi" }], tools: "abc" },
      {
        messages: [
          {
            role: "user",
            content: [{ type: "image_url", image_url: { url: "data:image/png;base64,AA==" } }],
          },
        ],
      },
    ];
    for (const body of cases) {
      const r = await send(body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(errorOf(r.text)).toMatchObject({ code: "invalid_request", retryable: false });
    }
    expect(e.bodies).toHaveLength(0);
  });

  it("image content passes to a model with a projector", async () => {
    const e = await engine((_q, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ id: ENGINE_ID, choices: [] }));
    });
    const r = await (
      await gateway(cluster(e.url, { mmproj: true }).view)
    )({
      messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }],
    });
    expect(r.status).toBe(200);
    expect(e.bodies).toHaveLength(1);
  });
});

describe("streams", () => {
  it("an engine that dies mid-event: the client sees whole events, then one error event", async () => {
    const e = await engine((req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(chunk(ENGINE_ID, "Hello"));
      // An event's first line without its terminating blank line, flushed on its own; then it dies.
      res.write(`data: {"choices":[{"index":0,"delta":{"content":"wor"}}]}\n`);
      setTimeout(() => req.socket.destroy(), 50);
    });
    const r = await (await gateway(cluster(e.url).view))({ stream: true });
    expect(r.status).toBe(200);
    const evs = events(r.text);
    expect(evs).toHaveLength(2);
    expect(JSON.stringify(evs[0])).toContain("Hello");
    expect(ErrorBodySchema.parse(evs[1]).error).toMatchObject({
      code: "instance_lost",
      retryable: true,
    });
  });

  it("an engine error event mid-stream is re-issued in the envelope and ends the stream", async () => {
    const e = await engine((_q, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(chunk(ENGINE_ID, "Hi"));
      res.write(
        `data: {"error":{"code":400,"message":"context size exceeded","type":"exceed_context_size_error","n_ctx":256}}\n\n`,
      );
      res.end(chunk(ENGINE_ID, "after"));
    });
    const r = await (await gateway(cluster(e.url).view))({ stream: true });
    const evs = events(r.text);
    expect(evs).toHaveLength(2);
    const err = ErrorBodySchema.parse(evs[1]).error;
    expect(err).toMatchObject({ code: "invalid_request", retryable: false });
    expect(err.details).toMatchObject({ engine_type: "exceed_context_size_error", n_ctx: 256 });
    expect(r.text).not.toContain("after");
  });

  it("an engine 5xx event mid-stream becomes upstream_failed", async () => {
    const e = await engine((_q, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(`data: {"error":{"code":500,"message":"decode failed","type":"server_error"}}\n\n`);
    });
    const r = await (await gateway(cluster(e.url).view))({ stream: true });
    expect(ErrorBodySchema.parse(events(r.text)[0]).error.code).toBe("upstream_failed");
  });

  it("a stalled stream ends with upstream_timeout after the idle bound", async () => {
    const e = await engine((_q, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(chunk(ENGINE_ID, "Hi")); // then silence
    });
    const r = await (
      await gateway(cluster(e.url).view, { idle_timeout_ms: 300 })
    )({ stream: true });
    const evs = events(r.text);
    expect(ErrorBodySchema.parse(evs.at(-1)).error).toMatchObject({
      code: "upstream_timeout",
      retryable: true,
    });
  });

  it("complete events pass with the command id; a split event is held until it completes", async () => {
    const e = await engine((_q, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      const all = chunk(ENGINE_ID, "a") + chunk(ENGINE_ID, "b") + "data: [DONE]\n\n";
      let i = 0;
      const t = setInterval(() => {
        res.write(all.slice(i, i + 7));
        i += 7;
        if (i >= all.length) {
          clearInterval(t);
          res.end();
        }
      }, 1);
    });
    const r = await (await gateway(cluster(e.url).view))({ stream: true });
    const evs = events(r.text);
    expect(evs).toHaveLength(3);
    expect(r.text).not.toContain(ENGINE_ID);
    expect((evs[0] as { id: string }).id).toMatch(/^chatcmpl-[0-9a-f]{32}$/);
  });

  it("a session change ends an open stream with session_changed at an event boundary", async () => {
    const c = cluster("");
    const e = await engine((_q, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(chunk(ENGINE_ID, "Hi"));
      res.write(`data: {"choices":[{"index":0}]}\n`);
      setTimeout(() => c.changeSession("s-next" as SessionId), 100);
    });
    c.view.snapshot().runners[`${INSTANCE}/0`]!.endpoint = e.url;
    const r = await (await gateway(c.view))({ stream: true });
    const evs = events(r.text);
    expect(ErrorBodySchema.parse(evs.at(-1)).error.code).toBe("session_changed");
  });
});

describe("generation cap", () => {
  it("a request without max_tokens gets the configured default; an explicit one is kept", async () => {
    const e = await engine((_q, res) => res.end(JSON.stringify({ id: ENGINE_ID, choices: [] })));
    const send = await gateway(cluster(e.url).view, { default_max_tokens: 77 });
    await send({ max_tokens: undefined });
    await send({ max_tokens: 5 });
    await send({ max_completion_tokens: 9 });
    expect(e.bodies.map((b) => [b.max_tokens, b.max_completion_tokens])).toEqual([
      [77, undefined],
      [5, undefined],
      [undefined, 9],
    ]);
  });
});

describe("observing the chat path", () => {
  it("a stream reports its phases in order, with the engine's timings from the final chunk", async () => {
    const e = await engine((_q, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(chunk(ENGINE_ID, "Hi"));
      res.end(
        `data: {"choices":[],"id":"${ENGINE_ID}","timings":{"prompt_n":5,"prompt_ms":1.5,"predicted_n":2,"predicted_ms":3.25},"usage":{"completion_tokens":2}}\n\ndata: [DONE]\n\n`,
      );
    });
    const seen: ChatEvent[] = [];
    const send = await gateway(cluster(e.url).view, {}, () => ({ event: (x) => seen.push(x) }));
    await send({ stream: true });
    expect(seen.map((x) => x.type)).toEqual([
      "validated",
      "routed",
      "sent",
      "task",
      "headers",
      "first_chunk",
      "engine",
      "end",
    ]);
    const at = seen.map((x) => x.at);
    expect([...at].sort((a, b) => a - b)).toEqual(at);
    expect(seen.find((x) => x.type === "engine")).toMatchObject({
      timings: { prompt_ms: 1.5, predicted_ms: 3.25 },
      usage: { completion_tokens: 2 },
    });
    expect(seen.at(-1)).toMatchObject({ ok: true, status: 200 });
  });

  it("a refused request ends with its code and status", async () => {
    const e = await engine((_q, res) => res.end("{}"));
    const seen: ChatEvent[] = [];
    const send = await gateway(cluster(e.url).view, {}, () => ({ event: (x) => seen.push(x) }));
    await send({ tools: "abc" });
    expect(seen.at(-1)).toMatchObject({
      type: "end",
      ok: false,
      status: 400,
      code: "invalid_request",
    });
  });
});

describe("a token's models and limits", () => {
  const KEY = "k".repeat(32);
  /** The gateway with one inference token; the cluster view's commands are recorded (and scripted). */
  async function withToken(
    token: { models?: string[]; limits?: Record<string, number> },
    answer: (cmd: Command) => ServiceError | undefined = () => undefined,
  ) {
    const e = await engine((_q, res) => {
      res.setHeader("content-type", "application/json");
      res.end(
        JSON.stringify({
          id: ENGINE_ID,
          choices: [{ index: 0, message: { role: "assistant", content: "ok" } }],
          usage: { prompt_tokens: 7, completion_tokens: 5 },
        }),
      );
    });
    const c = cluster(e.url);
    const commands: { cmd: Command; engineRequestsBefore: number }[] = [];
    const inner = c.view.command.bind(c.view);
    const view: ClusterView = {
      ...c.view,
      command: (cmd) => {
        commands.push({ cmd, engineRequestsBefore: e.bodies.length });
        const refused = answer(cmd);
        return refused ? Promise.reject(refused) : inner(cmd);
      },
    };
    const app = createGatewayApp({
      cluster: view,
      log: silentLogger(),
      name: "t",
      auth: { tokens: [{ name: "alice", token: KEY, scopes: ["inference"], ...token }] },
    });
    const base = await listen(app);
    const headers = { authorization: `Bearer ${KEY}`, "content-type": "application/json" };
    return {
      engine: e,
      commands,
      models: async () =>
        (
          (await (await fetch(`${base}/v1/models`, { headers })).json()) as {
            data: { id: string }[];
          }
        ).data.map((m) => m.id),
      chat: async (model: string = MODEL) => {
        const r = await fetch(`${base}/v1/chat/completions`, {
          method: "POST",
          headers,
          body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] }),
        });
        return { status: r.status, text: await r.text(), retryAfter: r.headers.get("retry-after") };
      },
    };
  }

  it("a model outside the token's patterns is 403 naming them, before anything is looked up; /v1/models lists only what it may use", async () => {
    const denied = await withToken({ models: ["other/*", "org/t?ny-*"] });
    const r = await denied.chat();
    expect(r.status).toBe(403);
    const err = errorOf(r.text);
    expect(err.code).toBe("forbidden");
    expect(err.message).toBe(
      'token "alice" may not use model org/tiny; it may use models matching other/*, org/t?ny-*',
    );
    expect(err.details).toEqual({ token: "alice", allowed_models: ["other/*", "org/t?ny-*"] });
    // Even a model that does not exist is 403, not 404: the token learns nothing beyond its patterns.
    expect((await denied.chat("org/nothing")).status).toBe(403);
    expect(denied.engine.bodies).toHaveLength(0);
    expect(denied.commands).toHaveLength(0);
    expect(await denied.models()).toEqual([]);

    const allowed = await withToken({ models: ["org/*"] });
    expect((await allowed.chat()).status).toBe(200);
    expect(await allowed.models()).toEqual([MODEL]);
  });

  it("a token with limits: the master admits its task before the engine sees the request; its tokens are reported at the end", async () => {
    const g = await withToken({ limits: { requests_per_minute: 60, tokens_per_minute: 1000 } });
    expect((await g.chat()).status).toBe(200);
    const create = g.commands.find((c) => c.cmd.type === "CreateTask")!;
    expect(create.cmd).toMatchObject({
      token: { name: "alice", limits: { requests_per_minute: 60, tokens_per_minute: 1000 } },
    });
    expect(create.engineRequestsBefore).toBe(0);
    // The FinishTask rides with the next CreateTask (or a short delay) and carries prompt + completion.
    await new Promise((r) => setTimeout(r, 400));
    expect(g.commands.find((c) => c.cmd.type === "FinishTask")?.cmd).toMatchObject({ tokens: 12 });
  });

  it("a refusal is 429 rate_limited with Retry-After and the envelope, and the engine never sees the request", async () => {
    const g = await withToken({ limits: { requests_per_minute: 1 } }, (cmd) =>
      cmd.type === "CreateTask"
        ? new ServiceError(
            "rate_limited",
            'token "alice" reached its limit of 1 requests per minute (1 now); retry after 37 s',
            {
              details: { token: "alice", limit: "requests_per_minute", value: 1, used: 1 },
              retryAfterS: 37,
            },
          )
        : undefined,
    );
    const r = await g.chat();
    expect(r.status).toBe(429);
    expect(r.retryAfter).toBe("37");
    const err = errorOf(r.text);
    expect(err).toMatchObject({
      code: "rate_limited",
      type: "rate_limit_error",
      retryable: true,
      details: { limit: "requests_per_minute" },
    });
    expect(g.engine.bodies).toHaveLength(0);
    expect(g.commands.map((c) => c.cmd.type)).toEqual(["CreateTask"]);
  });

  it("a token without limits: its task carries no token, so the master has nothing to admit", async () => {
    const g = await withToken({ models: ["*"] });
    expect((await g.chat()).status).toBe(200);
    const create = g.commands.find((c) => c.cmd.type === "CreateTask")!;
    expect(create.cmd).not.toHaveProperty("token");
  });
});

describe("prefix routing (chat.prefix_routing hash and off)", () => {
  const answer = (_q: IncomingMessage, res: ServerResponse) => {
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ id: ENGINE_ID, choices: [{ index: 0, message: { content: "ok" } }] }));
  };
  const system = { role: "system", content: "You plan trips." };
  const turns = (topic: string, n: number) => {
    const messages: { role: string; content: string }[] = [
      system,
      { role: "user", content: `About ${topic}.` },
    ];
    for (let i = 1; i < n; i++)
      messages.push({ role: "assistant", content: "..." }, { role: "user", content: `more ${i}` });
    return messages;
  };
  const engineOf = (
    a: { bodies: unknown[] },
    b: { bodies: unknown[] },
    before: [number, number],
  ) => (a.bodies.length > before[0] ? "a" : b.bodies.length > before[1] ? "b" : "none");

  it("every turn of a conversation goes to the same replica; conversations spread over both", async () => {
    const a = await engine(answer);
    const b = await engine(answer);
    const send = await gateway(twoInstances(a.url, b.url).view, { prefix_routing: "hash" });
    const homes = new Map<string, Set<string>>();
    for (let c = 0; c < 12; c++) {
      for (let t = 1; t <= 3; t++) {
        const before: [number, number] = [a.bodies.length, b.bodies.length];
        const r = await send({ messages: turns(`city ${c}`, t) });
        expect(r.status, r.text).toBe(200);
        const set = homes.get(`city ${c}`) ?? new Set<string>();
        set.add(engineOf(a, b, before));
        homes.set(`city ${c}`, set);
      }
    }
    for (const [conv, set] of homes) expect([...set], conv).toHaveLength(1);
    const used = new Set([...homes.values()].map((s) => [...s][0]));
    expect([...used].sort()).toEqual(["a", "b"]);
  });

  it("off: requests one after another go to the least loaded, then the oldest (always i-1 here)", async () => {
    const a = await engine(answer);
    const b = await engine(answer);
    const send = await gateway(twoInstances(a.url, b.url).view, { prefix_routing: "off" });
    for (let c = 0; c < 6; c++)
      expect((await send({ messages: turns(`city ${c}`, 1) })).status).toBe(200);
    expect(a.bodies).toHaveLength(6);
    expect(b.bodies).toHaveLength(0);
  });
});

describe("retry before the first byte", () => {
  /** A port nothing listens on: connecting is refused, as to an engine that died. */
  async function deadEndpoint(): Promise<string> {
    const s = createServer();
    await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
    const port = (s.address() as AddressInfo).port;
    await new Promise((r) => s.close(r));
    return `http://127.0.0.1:${port}`;
  }

  const answer = (_q: IncomingMessage, res: ServerResponse) => {
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ id: ENGINE_ID, choices: [{ index: 0, message: { content: "ok" } }] }));
  };

  it("an instance whose engine is gone is tried once more on another ready instance: the client sees one answer", async () => {
    const good = await engine(answer);
    const seen: ChatEvent[] = [];
    const send = await gateway(twoInstances(await deadEndpoint(), good.url).view, {}, () => ({
      event: (x) => seen.push(x),
    }));
    const r = await send({});
    expect(r.status, r.text).toBe(200);
    expect(good.bodies).toHaveLength(1);
    const routed = seen.filter((e) => e.type === "routed").map((e) => e.instanceId);
    expect(routed).toEqual(["i-1", "i-2"]);
    expect(seen.find((e) => e.type === "retry")).toMatchObject({
      code: "instance_lost",
      instanceId: "i-1",
    });
    expect(seen.at(-1)).toMatchObject({ type: "end", ok: true });
  });

  it("a stream whose instance is lost before its first byte is retried too", async () => {
    const good = await engine((_q, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(`${chunk(ENGINE_ID, "hi")}data: [DONE]\n\n`);
    });
    const send = await gateway(twoInstances(await deadEndpoint(), good.url).view);
    const r = await send({ stream: true });
    expect(r.status).toBe(200);
    expect(events(r.text).at(-1)).toBe("[DONE]");
  });

  it("one retry only: both instances lost is the loss's typed error; a single instance is not retried", async () => {
    const both = await gateway(twoInstances(await deadEndpoint(), await deadEndpoint()).view);
    const r = await both({});
    expect(r.status).toBe(500);
    expect(errorOf(r.text).code).toBe("instance_lost");
    const seen: ChatEvent[] = [];
    const one = await gateway(cluster(await deadEndpoint()).view, {}, () => ({
      event: (x) => seen.push(x),
    }));
    expect((await one({})).status).toBe(500);
    expect(seen.some((e) => e.type === "retry")).toBe(false);
  });

  it("what a retry cannot mend is not retried: the engine's own error, and a timeout", async () => {
    const failing = await engine((_q, res) => {
      res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { code: 500, message: "boom", type: "server_error" } }));
    });
    const good = await engine(answer);
    const send = await gateway(twoInstances(failing.url, good.url).view);
    expect((await send({})).status).toBe(502);
    const silent = await engine(() => {}); // never answers
    const slow = await gateway(twoInstances(silent.url, good.url).view, { total_timeout_ms: 200 });
    const r = await slow({});
    expect(r.status).toBe(504);
    expect(good.bodies).toHaveLength(0);
  });
});

describe("the rest of the OpenAI surface: text completions and one model", () => {
  it("POST /v1/completions goes to the engine's /v1/completions with the same routing, and answers with a cmpl- id", async () => {
    const paths: string[] = [];
    const e = await engine((req, res) => {
      paths.push(req.url ?? "");
      res.setHeader("content-type", "application/json");
      res.end(
        JSON.stringify({
          id: ENGINE_ID,
          object: "text_completion",
          choices: [{ index: 0, text: " world", finish_reason: "length" }],
        }),
      );
    });
    const app = createGatewayApp({ cluster: cluster(e.url).view, log: silentLogger(), name: "t" });
    const post = (body: unknown) =>
      app.request("/v1/completions", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    const r = await post({ model: MODEL, prompt: "hello", max_tokens: 2 });
    expect(r.status).toBe(200);
    const json = (await r.json()) as { id: string; choices: { text: string }[] };
    expect(json.id).toMatch(/^cmpl-[0-9a-f]{32}$/);
    expect(json.choices[0]!.text).toBe(" world");
    expect(paths).toEqual(["/v1/completions"]);
    expect(e.bodies[0]).toMatchObject({ model: MODEL, prompt: "hello", max_tokens: 2 });
    // Its own schema: a chat body is not a completion.
    const bad = await post({ model: MODEL, messages: [{ role: "user", content: "hi" }] });
    expect(bad.status).toBe(400);
    expect(errorOf(await bad.text()).message).toBe(
      "request body: prompt is required (a string or an array)",
    );
    expect(paths).toHaveLength(1);
    // Without max_tokens, the configured default applies, as for chat.
    await post({ model: MODEL, prompt: ["a", "b"] });
    expect(e.bodies[1]).toMatchObject({ prompt: ["a", "b"], max_tokens: 2048 });
  });

  it("POST /v1/embeddings goes only to embedding instances, answers the engine's list as it is; chat does not go there", async () => {
    const paths: string[] = [];
    const list = {
      object: "list",
      model: MODEL,
      data: [{ object: "embedding", index: 0, embedding: [0.25, -0.5] }],
      usage: { prompt_tokens: 2, total_tokens: 2 },
    };
    const e = await engine((req, res) => {
      paths.push(req.url ?? "");
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify(list));
    });
    const post = (app: ReturnType<typeof createGatewayApp>, path: string, body: unknown) =>
      app.request(path, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    const emb = createGatewayApp({
      cluster: cluster(e.url, { embeddings: true }).view,
      log: silentLogger(),
      name: "t",
    });
    const r = await post(emb, "/v1/embeddings", { model: MODEL, input: ["hi", "there"] });
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual(list);
    expect(r.headers.get("x-command-id")).toMatch(/^emb-[0-9a-f]{32}$/);
    expect(paths).toEqual(["/v1/embeddings"]);
    // No max_tokens is added to an embeddings request.
    expect(e.bodies[0]).toEqual({ model: MODEL, input: ["hi", "there"] });
    // Chat on an embeddings-only model, and embeddings on a chat model: a 400 saying what to place.
    const chatOnEmb = await post(emb, "/v1/chat/completions", {
      model: MODEL,
      messages: [{ role: "user", content: "hi" }],
    });
    expect(chatOnEmb.status).toBe(400);
    expect(errorOf(await chatOnEmb.text()).message).toBe(
      `/v1/chat/completions needs a generate instance of ${MODEL}; its ready instances are embed: place one with "kind": "generate" (ic place ${MODEL} --kind generate)`,
    );
    const chatApp = createGatewayApp({
      cluster: cluster(e.url).view,
      log: silentLogger(),
      name: "t",
    });
    const embOnChat = await post(chatApp, "/v1/embeddings", { model: MODEL, input: "hi" });
    expect(embOnChat.status).toBe(400);
    expect(errorOf(await embOnChat.text()).message).toContain(
      `needs an embed instance of ${MODEL}; its ready instances are generate: place one with "kind": "embed"`,
    );
    // Its own schema.
    const bad = await post(emb, "/v1/embeddings", { model: MODEL, input: [] });
    expect(bad.status).toBe(400);
    expect(paths).toHaveLength(1);
  });

  it("GET /v1/models/{id}: the model when it is ready (slash plain or encoded), the chat path's 404 otherwise", async () => {
    const app = createGatewayApp({
      cluster: cluster("http://127.0.0.1:9").view,
      log: silentLogger(),
      name: "t",
    });
    for (const path of [`/v1/models/${MODEL}`, `/v1/models/${encodeURIComponent(MODEL)}`]) {
      const r = await app.request(path);
      expect(r.status, path).toBe(200);
      expect(await r.json()).toEqual({
        id: MODEL,
        object: "model",
        created: 0,
        owned_by: "cluster",
        kinds: ["generate"],
        context_length: 256,
        max_model_len: 256,
        capabilities: ["completion"],
      });
    }
    const missing = await app.request("/v1/models/org/none");
    expect(missing.status).toBe(404);
    expect(errorOf(await missing.text()).code).toBe("model_not_found");
  });
});

describe("a draining node takes no new requests", () => {
  /** MODEL on i-1 (node p-0) and i-2 (node p-1); `draining` peers say so in their heartbeat. */
  function withDraining(
    first: string,
    second: string,
    draining: string[],
    heard: string[] = ["p-0", "p-1"],
  ) {
    const c = cluster(first);
    const s = c.view.snapshot();
    const i2 = "i-2" as InstanceId;
    const onP1 = nodeIdFor(S, "p-1");
    s.members[onP1] = {
      node_id: onP1,
      peer_key: "p-1",
      name: "node-b",
      api_url: "",
      host: "",
      started_at: 1,
      joined_at: 0,
    };
    s.instances[i2] = {
      ...s.instances[INSTANCE]!,
      instance_id: i2,
      created_at: 2,
      assignments: [
        { node_id: onP1, peer_key: "p-1", rank: 0, weight_bytes: 1, required_bytes: 1 },
      ],
    };
    s.runners[`${i2}/0`] = {
      ...s.runners[`${INSTANCE}/0`]!,
      instance_id: i2,
      node_id: onP1,
      endpoint: second,
    };
    const peers = heard.map((peer_key) => ({
      heartbeat: {
        peer_key,
        links: [],
        ...(draining.includes(peer_key) ? { draining: true as const } : {}),
      },
      lastHeard: 0,
    }));
    return { ...c.view, livePeers: () => peers } as unknown as ClusterView;
  }
  const answer = (_q: IncomingMessage, res: ServerResponse) => {
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ id: ENGINE_ID, choices: [{ index: 0, message: { content: "ok" } }] }));
  };

  it("routes around an instance on a draining node, even the one balancing prefers", async () => {
    const a = await engine(answer);
    const b = await engine(answer);
    const send = await gateway(withDraining(a.url, b.url, ["p-0"]));
    for (let i = 0; i < 3; i++) expect((await send({})).status).toBe(200);
    expect(a.bodies).toHaveLength(0);
    expect(b.bodies).toHaveLength(3);
  });

  it("a model served only on draining nodes is still served there until it is ready elsewhere (make before break)", async () => {
    const a = await engine(answer);
    const b = await engine(answer);
    const send = await gateway(withDraining(a.url, b.url, ["p-0", "p-1"]));
    for (let i = 0; i < 4; i++) expect((await send({})).status).toBe(200);
    expect(a.bodies.length + b.bodies.length).toBe(4);
  });

  it("an instance whose node this gateway has not heard (its engine key unknown) is not routed to", async () => {
    const a = await engine(answer);
    const b = await engine(answer);
    // p-1 not heard (just joined, or gone silent): every request goes to p-0's instance.
    const send = await gateway(withDraining(a.url, b.url, [], ["p-0"]));
    for (let i = 0; i < 3; i++) expect((await send({})).status).toBe(200);
    expect(b.bodies).toHaveLength(0);
    // Neither heard: a retryable 404 saying so.
    const none = await gateway(withDraining(a.url, b.url, [], []));
    const r = await none({});
    expect(r.status).toBe(404);
    const err = errorOf(r.text);
    expect(err).toMatchObject({ code: "model_not_ready", retryable: true });
    expect(err.details).toMatchObject({ phase: "unheard" });
  });
});

describe("stream migration (opt-in)", () => {
  const FIRST_ID = `chatcmpl-${"a".repeat(32)}`;
  const SECOND_ID = `chatcmpl-${"b".repeat(32)}`;
  /** An event as llama-server streams it: id, created and model of its own completion. */
  const llamaEvent = (id: string, created: number, model: string, o: Record<string, unknown>) =>
    `data: ${JSON.stringify({ id, created, model, object: "chat.completion.chunk", ...o })}\n\n`;
  const deltaEvent = (
    id: string,
    created: number,
    model: string,
    delta: Record<string, unknown>,
    finish: string | null = null,
    more: Record<string, unknown> = {},
  ) =>
    llamaEvent(id, created, model, {
      choices: [{ index: 0, delta, finish_reason: finish }],
      ...more,
    });

  /** Streams the role and three tokens, half an event, then its socket is destroyed. */
  const dyingEngine = () =>
    engine((req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(deltaEvent(FIRST_ID, 1000, "first.gguf", { role: "assistant", content: null }));
      for (const t of ["Hello", " wor", "ld"])
        res.write(deltaEvent(FIRST_ID, 1000, "first.gguf", { content: t }));
      res.write(`data: {"choices":[{"index":0,"delta":{"content":"LOST"}}]}\n`);
      setTimeout(() => req.socket.destroy(), 50);
    });

  /** Continues: its own role event, two tokens, the finish (with timings), usage if asked, [DONE]. */
  const continuingEngine = () =>
    engine((req, res, raw) => {
      const body = JSON.parse(raw) as { stream_options?: { include_usage?: boolean } };
      const usage = body.stream_options?.include_usage === true;
      const timings = { cache_n: 10, prompt_n: 3, predicted_n: 2, prompt_ms: 1, predicted_ms: 2 };
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(deltaEvent(SECOND_ID, 2000, "second.gguf", { role: "assistant", content: null }));
      res.write(deltaEvent(SECOND_ID, 2000, "second.gguf", { content: ", how" }));
      res.write(deltaEvent(SECOND_ID, 2000, "second.gguf", { content: " are" }));
      res.write(deltaEvent(SECOND_ID, 2000, "second.gguf", {}, "length", usage ? {} : { timings }));
      if (usage)
        res.write(
          llamaEvent(SECOND_ID, 2000, "second.gguf", {
            choices: [],
            usage: { prompt_tokens: 13, completion_tokens: 2, total_tokens: 15 },
            timings,
          }),
        );
      res.end("data: [DONE]\n\n");
    });

  type Chunk = {
    id: string;
    created: number;
    model: string;
    choices: { delta?: { role?: string; content?: string | null } }[];
    usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
    x_ic?: { migrated_from?: string };
  };

  it.each([
    {
      how: "chat.migrate_streams",
      limits: { migrate_streams: true },
      headers: {} as Record<string, string>,
      usage: false,
    },
    {
      how: "the x-ic-migrate: 1 header",
      limits: {},
      headers: { "x-ic-migrate": "1" },
      usage: true,
    },
  ])(
    "opted in by $how: a stream whose engine dies after a few tokens goes on in the same stream on the other replica",
    async ({ limits, headers, usage }) => {
      const first = await dyingEngine();
      const second = await continuingEngine();
      const migrations: MigrationReport[] = [];
      const send = await gateway(twoInstances(first.url, second.url).view, limits, undefined, {
        onChatMigration: (m) => migrations.push(m),
      });
      const r = await send(
        {
          stream: true,
          max_tokens: 10,
          ...(usage ? { stream_options: { include_usage: true } } : {}),
        },
        headers,
      );
      expect(r.status).toBe(200);
      const evs = events(r.text);
      expect(evs.at(-1)).toBe("[DONE]");
      const chunks = evs.slice(0, -1) as Chunk[];
      expect(chunks.some((c) => "error" in c)).toBe(false);
      // One completion: the command id, and the first engine's created and model, throughout.
      expect(chunks[0]!.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/);
      for (const c of chunks)
        expect(c).toMatchObject({ id: chunks[0]!.id, created: 1000, model: "first.gguf" });
      expect(r.text).not.toContain(SECOND_ID);
      // One role event; the text is the first part and then the continuation.
      expect(chunks.filter((c) => c.choices[0]?.delta?.role !== undefined)).toHaveLength(1);
      const text = chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
      expect(text).toBe("Hello world, how are");
      // The final event names the lost instance; with usage asked, it is the usage event, summed.
      const last = chunks.at(-1)!;
      expect(last.x_ic).toEqual({ migrated_from: "i-1" });
      expect(chunks.filter((c) => c.x_ic)).toHaveLength(1);
      if (usage)
        expect(last.usage).toEqual({ prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 });
      else expect(chunks.some((c) => c.usage)).toBe(false);
      // The second engine continued the generated text (never the half event) with the rest of the cap.
      expect(second.bodies).toHaveLength(1);
      const cont = second.bodies[0] as {
        messages: { role: string; content: string }[];
        max_tokens: number;
      };
      expect(cont.messages.at(-1)).toEqual({ role: "assistant", content: "Hello world" });
      expect(cont.messages).toHaveLength(2);
      expect(cont).toMatchObject({
        max_tokens: 7,
        continue_final_message: true,
        add_generation_prompt: false,
        stream: true,
      });
      expect(migrations).toHaveLength(1);
      expect(migrations[0]).toMatchObject({ model: MODEL, outcome: "migrated" });
      expect(migrations[0]!.seconds).toBeGreaterThanOrEqual(0);
    },
  );

  it("the observer sees one request: its first try's phases, then the whole answer's usage and a good end", async () => {
    const first = await dyingEngine();
    const second = await continuingEngine();
    const seen: ChatEvent[] = [];
    const send = await gateway(
      twoInstances(first.url, second.url).view,
      { migrate_streams: true },
      () => ({ event: (x) => seen.push(x) }),
    );
    await send({ stream: true, max_tokens: 10 });
    expect(seen.filter((e) => e.type === "routed").map((e) => e.instanceId)).toEqual(["i-1"]);
    expect(seen.filter((e) => e.type === "first_chunk")).toHaveLength(1);
    expect(seen.find((e) => e.type === "engine")).toMatchObject({
      usage: { prompt_tokens: 10, completion_tokens: 5 },
    });
    expect(seen.at(-1)).toMatchObject({ type: "end", ok: true, status: 200 });
  });

  it("task bookkeeping: the lost try's task is failed, the continuation has its own task, finished", async () => {
    const first = await dyingEngine();
    const second = await continuingEngine();
    const c = twoInstances(first.url, second.url);
    const commands: Command[] = [];
    const inner = c.view.command.bind(c.view);
    const view: ClusterView = {
      ...c.view,
      // Each task named after its instance (the scripted view numbers them by events).
      command: async (cmd) => {
        commands.push(cmd);
        const reply = await inner(cmd);
        return cmd.type === "CreateTask"
          ? { ...reply, task_id: `t-${cmd.instance_id}` as TaskId }
          : reply;
      },
    };
    const send = await gateway(view, { migrate_streams: true });
    const r = await send({ stream: true, max_tokens: 10 });
    expect(events(r.text).at(-1)).toBe("[DONE]");
    await new Promise((res) => setTimeout(res, 400)); // FinishTask rides a later batch
    const created = commands.filter((x) => x.type === "CreateTask");
    expect(created.map((x) => x.instance_id)).toEqual(["i-1", "i-2"]);
    expect(new Set(created.map((x) => x.command_id)).size).toBe(1);
    const failed = commands.filter((x) => x.type === "FailTask");
    const finished = commands.filter((x) => x.type === "FinishTask");
    expect(failed).toHaveLength(1);
    expect(finished).toHaveLength(1);
    expect(failed[0]!.task_id).toBe("t-i-1");
    expect(finished[0]!.task_id).toBe("t-i-2");
  });

  it("a client that disconnects is not migrated", async () => {
    let timer: NodeJS.Timeout | undefined;
    const endless = await engine((_q, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      timer = setInterval(
        () => res.write(deltaEvent(FIRST_ID, 1000, "first.gguf", { content: "x" })),
        10,
      );
      res.on("close", () => clearInterval(timer));
    });
    closers.push(async () => clearInterval(timer));
    const second = await continuingEngine();
    const migrations: MigrationReport[] = [];
    const app = createGatewayApp({
      cluster: twoInstances(endless.url, second.url).view,
      log: silentLogger(),
      name: "t",
      chat: { migrate_streams: true, prefix_routing: "off" },
      onChatMigration: (m) => migrations.push(m),
    });
    const base = await listen(app);
    const abort = new AbortController();
    const res = await fetch(`${base}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: "user", content: "hi" }],
        stream: true,
      }),
      signal: abort.signal,
    });
    const reader = res.body!.getReader();
    await reader.read();
    abort.abort();
    await new Promise((r) => setTimeout(r, 300));
    expect(second.bodies).toHaveLength(0);
    expect(migrations).toHaveLength(0);
  });

  it("without opt-in: the spec's error event, as before, and nothing goes to the other replica", async () => {
    const first = await dyingEngine();
    const second = await continuingEngine();
    const send = await gateway(twoInstances(first.url, second.url).view);
    const r = await send({ stream: true, max_tokens: 10 });
    const evs = events(r.text);
    // The role event and three tokens, then the error (the half event never reaches the client).
    expect(evs).toHaveLength(5);
    expect(ErrorBodySchema.parse(evs.at(-1)).error).toMatchObject({
      code: "instance_lost",
      retryable: true,
    });
    expect(second.bodies).toHaveLength(0);
    // `x-ic-migrate: 0` turns the configured default off for one request.
    const off = await gateway(twoInstances(first.url, second.url).view, { migrate_streams: true });
    const r2 = await off({ stream: true, max_tokens: 10 }, { "x-ic-migrate": "0" });
    expect(ErrorBodySchema.parse(events(r2.text).at(-1)).error.code).toBe("instance_lost");
    expect(second.bodies).toHaveLength(0);
  });

  it("opted in, with no other ready replica: the same typed error event", async () => {
    const first = await dyingEngine();
    const migrations: MigrationReport[] = [];
    const send = await gateway(cluster(first.url).view, { migrate_streams: true }, undefined, {
      onChatMigration: (m) => migrations.push(m),
    });
    const r = await send({ stream: true, max_tokens: 10 });
    const evs = events(r.text);
    // The role event and three tokens, then the error (the half event never reaches the client).
    expect(evs).toHaveLength(5);
    expect(ErrorBodySchema.parse(evs.at(-1)).error).toMatchObject({
      code: "instance_lost",
      retryable: true,
    });
    expect(migrations.map((m) => m.outcome)).toEqual(["no_instance"]);
  });

  it("a continuation that fails before its first event ends with the loss's error, once", async () => {
    const first = await dyingEngine();
    const refusing = await engine((_q, res) => {
      res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { code: 500, message: "boom", type: "server_error" } }));
    });
    const migrations: MigrationReport[] = [];
    const send = await gateway(
      twoInstances(first.url, refusing.url).view,
      { migrate_streams: true },
      undefined,
      { onChatMigration: (m) => migrations.push(m) },
    );
    const r = await send({ stream: true, max_tokens: 10 });
    const evs = events(r.text);
    expect(ErrorBodySchema.parse(evs.at(-1)).error.code).toBe("instance_lost");
    expect(evs.filter((e) => typeof e === "object" && e !== null && "error" in e)).toHaveLength(1);
    expect(refusing.bodies).toHaveLength(1);
    expect(migrations.map((m) => m.outcome)).toEqual(["failed"]);
  });

  it("only a lost instance migrates: not the engine's own error event, nor an idle timeout", async () => {
    const erring = await engine((_q, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(deltaEvent(FIRST_ID, 1000, "first.gguf", { content: "Hi" }));
      res.end(`data: {"error":{"code":500,"message":"decode failed","type":"server_error"}}\n\n`);
    });
    const stalling = await engine((_q, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(deltaEvent(FIRST_ID, 1000, "first.gguf", { content: "Hi" })); // then silence
    });
    const second = await continuingEngine();
    const a = await gateway(twoInstances(erring.url, second.url).view, { migrate_streams: true });
    const ra = await a({ stream: true, max_tokens: 10 });
    expect(ErrorBodySchema.parse(events(ra.text).at(-1)).error.code).toBe("upstream_failed");
    const b = await gateway(twoInstances(stalling.url, second.url).view, {
      migrate_streams: true,
      idle_timeout_ms: 300,
    });
    const rb = await b({ stream: true, max_tokens: 10 });
    expect(ErrorBodySchema.parse(events(rb.text).at(-1)).error.code).toBe("upstream_timeout");
    expect(second.bodies).toHaveLength(0);
  });

  it("a stream already at its max_tokens is not continued: the typed error", async () => {
    const first = await dyingEngine();
    const second = await continuingEngine();
    const send = await gateway(twoInstances(first.url, second.url).view, { migrate_streams: true });
    const r = await send({ stream: true, max_tokens: 3 });
    expect(ErrorBodySchema.parse(events(r.text).at(-1)).error.code).toBe("instance_lost");
    expect(second.bodies).toHaveLength(0);
  });

  it("non-streaming requests are not affected: the engine gets the request as it was", async () => {
    const e = await engine((_q, res) => {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ id: ENGINE_ID, choices: [] }));
    });
    const send = await gateway(cluster(e.url).view, { migrate_streams: true });
    const r = await send({ max_tokens: 10 }, { "x-ic-migrate": "1" });
    expect(r.status).toBe(200);
    expect(e.bodies[0]).toEqual({
      model: MODEL,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 10,
    });
  });
});
