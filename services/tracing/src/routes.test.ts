// The tracing endpoints through app.request(): the switch (config's initial value, PUT for new
// requests only, body validation), local list and stats, task id validation, and the cluster view
// against scripted peers over real HTTP (dedup by task id, unreachable / slow / refusing peers).
import { createServer } from "node:http";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Hono } from "hono";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { errorBody, httpStatusFor, ServiceError } from "@ic/protocol";
import type { ErrorBody, TaskId } from "@ic/protocol";
import type { ChatEvent } from "@ic/protocol";
import { silentLogger } from "@ic/log";
import { Tracing } from "./tracing.ts";
import { tracingRoutes } from "./routes.ts";
import type { TracePeer } from "./cluster.ts";
import type { TraceStats } from "./trace.ts";

const T0 = 1_763_900_000_000;
const TIMINGS = { prompt_n: 7, prompt_ms: 2.5, predicted_n: 5, predicted_ms: 4.75 };

/** Drives one observed request through `tracing` as the chat path would. */
function request(
  tracing: Tracing,
  taskId: string | undefined,
  at = T0,
  commandId = `chatcmpl-${taskId ?? "none"}`,
): boolean {
  const obs = tracing.observe({ commandId, receivedAt: at, path: "/v1/chat/completions" });
  if (!obs) return false;
  const evs: ChatEvent[] = [
    { type: "validated", at: at + 0.5, model: "test/tiny", stream: true },
    { type: "routed", at: at + 0.7, instanceId: "i-1", nodeId: "n-1", endpoint: "http://x:1" },
    { type: "sent", at: at + 1 },
    ...(taskId ? [{ type: "task" as const, at: at + 2, taskId: taskId as TaskId }] : []),
    { type: "headers", at: at + 5, status: 200 },
    { type: "first_chunk", at: at + 5.5 },
    { type: "engine", at: at + 11, timings: TIMINGS, usage: undefined },
    { type: "end", at: at + 11, ok: true, status: 200, code: undefined, message: undefined },
  ];
  for (const e of evs) obs.event(e);
  return true;
}

interface Peer {
  server: Server;
  url: string;
  seen: { path: string; auth: string | undefined }[];
}

async function scripted(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<Peer> {
  const seen: Peer["seen"] = [];
  const server = createServer((req, res) => {
    seen.push({ path: req.url ?? "", auth: req.headers.authorization });
    handler(req, res);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

const json = (res: ServerResponse, status: number, body: unknown) => {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
};

let dir: string;
let tracing: Tracing;
let app: Hono;
let peers: TracePeer[];
const servers: Server[] = [];

function makeApp(timeoutMs = 300): Hono {
  const a = new Hono();
  a.onError((err, c) => {
    const e = err instanceof ServiceError ? err : new ServiceError("internal", "internal error");
    return c.json(errorBody(e), httpStatusFor(e.code));
  });
  a.notFound((c) => {
    const e = new ServiceError("not_found", `no route ${c.req.method} ${c.req.path}`);
    return c.json(errorBody(e), 404);
  });
  tracingRoutes(a, {
    tracing,
    node: "node-1",
    fanOut: { peers: () => peers, token: () => "node-token", timeoutMs },
  });
  return a;
}

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "tracing-routes-"));
  tracing = new Tracing({
    config: { enabled: false, retention_days: 3, dir },
    log: silentLogger(),
    node: "node-1",
  });
  await tracing.start();
  peers = [];
  app = makeApp();
});

afterEach(async () => {
  await tracing.stop();
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
  await rm(dir, { recursive: true, force: true });
});

const put = (body: string) =>
  app.request("/v1/tracing", {
    method: "PUT",
    headers: { "content-type": "application/json" },
    body,
  });

describe("the switch", () => {
  it("starts from the config, and PUT affects new requests only", async () => {
    expect(await (await app.request("/v1/tracing")).json()).toMatchObject({
      enabled: false,
      retention_days: 3,
      dir,
    });
    // Off: the chat path gets no observer at all.
    expect(request(tracing, "t-off")).toBe(false);
    const inFlightOff = tracing.observe({ commandId: "c1", receivedAt: T0, path: "/v1/chat/completions" });
    const res = await put('{"enabled": true}');
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ enabled: true });
    expect(inFlightOff).toBeUndefined(); // started while off: stays untraced
    // A request that started while on is still written after tracing is switched off.
    const inFlightOn = tracing.observe({ commandId: "c2", receivedAt: T0 + 10, path: "/v1/chat/completions" })!;
    inFlightOn.event({ type: "validated", at: T0 + 11, model: "m", stream: false });
    inFlightOn.event({ type: "task", at: T0 + 12, taskId: "t-inflight" as TaskId });
    expect(request(tracing, "t-on", T0 + 20)).toBe(true);
    expect((await put('{"enabled": false}')).status).toBe(200);
    inFlightOn.event({
      type: "end",
      at: T0 + 13,
      ok: false,
      status: 502,
      code: "upstream_failed",
      message: "x",
    });
    expect(request(tracing, "t-off-again", T0 + 30)).toBe(false);
    await tracing.flush();
    const list = (await (await app.request("/v1/traces")).json()) as {
      traces: { taskId: string }[];
    };
    expect(list.traces.map((t) => t.taskId)).toEqual(["t-on", "t-inflight"]);
  });

  it.each([
    ["{}", "enabled"],
    ['{"enabled": "yes"}', "enabled"],
    ['{"enabled": true, "dir": "/tmp"}', "dir"],
    ["[true]", "body"],
    ["not json", "JSON"],
    ["", "JSON"],
    [`{"enabled": true, "pad": "${"x".repeat(4096)}"}`, "larger than 4096 bytes"],
  ])("refuses the body %j (invalid_request naming %s)", async (body, word) => {
    const res = await put(body);
    expect(res.status).toBe(400);
    const b = (await res.json()) as ErrorBody;
    expect(b.error.code).toBe("invalid_request");
    expect(b.error.message).toContain(word);
    expect(tracing.enabled).toBe(false);
  });
});

describe("local traces", () => {
  beforeEach(() => tracing.setEnabled(true));

  it("saves one trace per task id after the request, none for a request without one", async () => {
    request(tracing, "t-1", T0);
    request(tracing, undefined, T0 + 1);
    request(tracing, "t-2", T0 + 2);
    // Written after the response, never during the observer's call.
    expect(await readdir(dir)).toEqual([]);
    await tracing.flush();
    expect((await readdir(dir)).sort()).toEqual([`${T0}_t-1.json`, `${T0 + 2}_t-2.json`]);
    const res = await app.request("/v1/traces");
    expect(await res.json()).toEqual({
      traces: [
        { taskId: "t-2", createdAt: new Date(T0 + 2).toISOString(), modelId: "test/tiny" },
        { taskId: "t-1", createdAt: new Date(T0).toISOString(), modelId: "test/tiny" },
      ],
    });
    expect(
      ((await (await app.request("/v1/traces?limit=1")).json()) as { traces: unknown[] }).traces,
    ).toHaveLength(1);
    expect(tracing.status()).toMatchObject({ written: 2, dropped: 0, pending: 0 });
  });

  it("answers stats equal to the engine's timings, and the trace file itself", async () => {
    request(tracing, "t-1");
    await tracing.flush();
    const res = await app.request("/v1/traces/t-1/stats");
    expect(res.status).toBe(200);
    const s = (await res.json()) as TraceStats;
    expect(s).toMatchObject({
      taskId: "t-1",
      modelId: "test/tiny",
      prefillMs: TIMINGS.prompt_ms,
      decodeMs: TIMINGS.predicted_ms,
      promptTokens: 7,
      completionTokens: 5,
      totalMs: 11,
      ttftMs: 5.5,
      queueMs: 2, // first chunk 5.5 - prompt 2.5 = 3, sent at 1
    });
    const file = (await (await app.request("/v1/traces/t-1")).json()) as {
      traceEvents: { name: string }[];
    };
    expect(file.traceEvents.map((e) => e.name)).toContain("prefill");
  });

  it.each([
    ["/v1/traces/t-none/stats", 404, "not_found"],
    ["/v1/traces/..%2F..%2Fetc%2Fpasswd/stats", 400, "invalid_request"],
    ["/v1/traces/t.json/stats", 400, "invalid_request"],
    // The URL parser resolves dot segments first: this is /v1/stats, no route.
    ["/v1/traces/%2e%2e/stats", 404, "not_found"],
    ["/v1/traces/..%2Fx", 400, "invalid_request"],
    ["/v1/traces/cluster/..%2Fx/stats", 400, "invalid_request"],
    ["/v1/traces?limit=0", 400, "invalid_request"],
    ["/v1/traces?limit=1001", 400, "invalid_request"],
    ["/v1/traces/cluster?limit=x", 400, "invalid_request"],
  ])("GET %s is %i %s", async (path, status, code) => {
    const res = await app.request(path);
    expect(res.status).toBe(status);
    expect(((await res.json()) as ErrorBody).error.code).toBe(code);
  });
});

describe("cluster view", () => {
  beforeEach(() => tracing.setEnabled(true));

  async function peer(handler: (req: IncomingMessage, res: ServerResponse) => void) {
    const p = await scripted(handler);
    servers.push(p.server);
    return p;
  }

  it("merges live peers deduplicated by task id and lists unreachable ones without failing", async () => {
    request(tracing, "t-local", T0);
    request(tracing, "t-shared", T0 + 5);
    await tracing.flush();
    const good = await peer((req, res) => {
      if (req.url?.startsWith("/v1/traces?"))
        return json(res, 200, {
          traces: [
            { taskId: "t-remote", createdAt: new Date(T0 + 9).toISOString(), modelId: "m" },
            { taskId: "t-shared", createdAt: new Date(T0 + 5).toISOString(), modelId: "test/tiny" },
          ],
        });
      if (req.url === "/v1/traces/t-remote/stats") return json(res, 200, statsOf("t-remote"));
      return json(res, 404, errorBody(new ServiceError("not_found", "no trace")));
    });
    const slow = await peer(() => {}); // never answers
    const refusing = await peer((_req, res) =>
      json(res, 401, errorBody(new ServiceError("unauthorized", "unknown bearer token"))),
    );
    const old = await peer((req, res) =>
      json(res, 404, errorBody(new ServiceError("not_found", `no route GET ${req.url}`))),
    );
    // Closed after the others have their ports: a port freed earlier may be given to the next
    // server at once (the 401 peer answered on it once, where a refused connection was expected).
    const dead = await peer(() => {});
    await new Promise((r) => dead.server.close(r));
    peers = [
      { name: "node-2", apiUrl: good.url },
      { name: "node-3", apiUrl: dead.url },
      { name: "node-4", apiUrl: slow.url },
      { name: "node-5", apiUrl: refusing.url },
      { name: "node-6", apiUrl: old.url },
    ];
    const t0 = Date.now();
    const res = await app.request("/v1/traces/cluster");
    expect(Date.now() - t0).toBeLessThan(2000); // bounded by the per-peer timeout (300 ms here)
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      traces: { taskId: string; node: string }[];
      nodes: string[];
      unreachable: { node: string; error: string }[];
    };
    expect(body.traces.map((t) => [t.taskId, t.node])).toEqual([
      ["t-remote", "node-2"],
      ["t-shared", "node-1"],
      ["t-local", "node-1"],
    ]);
    expect(body.nodes).toEqual(["node-1", "node-2"]);
    expect(body.unreachable).toEqual([
      { node: "node-3", error: "ECONNREFUSED" },
      { node: "node-4", error: "no answer within 300 ms" },
      { node: "node-5", error: "HTTP 401: unknown bearer token" },
      { node: "node-6", error: expect.stringContaining("HTTP 404") },
    ]);
    // Peers are asked with this node's token.
    expect(good.seen[0]).toEqual({ path: "/v1/traces?limit=100", auth: "Bearer node-token" });

    // Stats: local first (no fan-out), else the peer that has it.
    const local = await app.request("/v1/traces/cluster/t-local/stats");
    expect(await local.json()).toMatchObject({ taskId: "t-local", foundOn: "node-1" });
    const remote = await app.request("/v1/traces/cluster/t-remote/stats");
    expect(remote.status).toBe(200);
    expect(await remote.json()).toMatchObject({
      taskId: "t-remote",
      foundOn: "node-2",
      unreachable: [{ node: "node-3" }, { node: "node-4" }, { node: "node-5" }, { node: "node-6" }],
    });
    const missing = await app.request("/v1/traces/cluster/t-nowhere/stats");
    expect(missing.status).toBe(404);
    const err = (await missing.json()) as ErrorBody;
    expect(err.error.code).toBe("not_found");
    expect(err.error.details).toMatchObject({
      unreachable: [{ node: "node-3" }, { node: "node-4" }, { node: "node-5" }, { node: "node-6" }],
    });
  });

  it("is this node's own list when it has no live peers", async () => {
    request(tracing, "t-a");
    await tracing.flush();
    const body = await (await app.request("/v1/traces/cluster")).json();
    expect(body).toEqual({
      traces: [
        {
          taskId: "t-a",
          createdAt: new Date(T0).toISOString(),
          modelId: "test/tiny",
          node: "node-1",
        },
      ],
      nodes: ["node-1"],
      unreachable: [],
    });
  });
});

function statsOf(taskId: string): TraceStats {
  return {
    taskId,
    modelId: "m",
    commandId: "c",
    instanceId: "i",
    node: "node-2",
    createdAt: new Date(T0).toISOString(),
    stream: false,
    ok: true,
    status: 200,
    error: null,
    totalMs: 1,
    ttftMs: 1,
    queueMs: 0,
    prefillMs: 1,
    decodeMs: 1,
    promptTokens: 1,
    cachedTokens: 0,
    completionTokens: 1,
    tokensPerSecond: 1000,
    promptTokensPerSecond: 1000,
  };
}
