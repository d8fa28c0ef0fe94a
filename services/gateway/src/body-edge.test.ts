// The one body-parsing edge (parseJson) through app.request(): nesting depth and encoding are refused
// there with 400 invalid_request, before any route re-serializes a pass-through field.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { emptyState, ErrorBodySchema } from "@ic/protocol";
import type { ClusterView } from "@ic/protocol";
import type { ControlState, InstanceId, ModelId, NodeId, SessionId, TaskId } from "@ic/protocol";
import { silentLogger } from "@ic/log";
import { createGatewayApp } from "./app.ts";
import { MAX_JSON_DEPTH, nestedDeeperThan } from "@ic/http";

const S = "s-edge" as SessionId;
const NODE = "n-edge" as NodeId;
const MODEL = "org/echo" as ModelId;

/** A scripted engine: answers every chat completion with the body it received, as a completion. */
function echoEngine() {
  const received: string[] = [];
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on("data", (b: Buffer) => parts.push(b));
    req.on("end", () => {
      received.push(Buffer.concat(parts).toString("utf8"));
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ id: "engine-id", object: "chat.completion", choices: [] }));
    });
  });
  return { server, received };
}

/** One ready instance of MODEL whose rank 0 is the given endpoint; commands are acknowledged. */
function readyCluster(endpoint: string): ClusterView {
  const state: ControlState = emptyState();
  state.session = {
    session_id: S,
    master_node_id: NODE,
    master_peer_key: "p-0",
    master_started_at: 0,
    started_at: 0,
  };
  state.instances["i-echo"] = {
    instance_id: "i-echo" as InstanceId,
    model_id: MODEL,
    sharding: "Pipeline",
    created_at: 1,
    assignments: [{ node_id: NODE, peer_key: "p-0", rank: 0, weight_bytes: 1, required_bytes: 1 }],
  };
  state.runners["i-echo/0"] = {
    instance_id: "i-echo" as InstanceId,
    node_id: NODE,
    rank: 0,
    state: "RunnerReady",
    endpoint,
    restarts: 0,
    since: 0,
  };
  let index = 0;
  const view: ClusterView = {
    peerKey: "p-0",
    synced: true,
    isMaster: true,
    sessionId: S,
    nodeId: NODE,
    snapshot: () => state,
    // As the agent's: self included (the instance's node is heard).
    livePeers: () => [{ heartbeat: { peer_key: "p-0", links: [] }, lastHeard: 0 }] as never,
    command: async () => ({ ok: true, index: ++index, task_id: `t-${index}` as TaskId }),
    on: () => () => {},
  };
  return view;
}

const nested = (depth: number, leaf = "0") => `${"[".repeat(depth)}${leaf}${"]".repeat(depth)}`;
const chatBody = (extra: string) =>
  `{"model":"${MODEL}","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"extra":${extra}}`;

describe("the JSON body edge", () => {
  const engine = echoEngine();
  let app: ReturnType<typeof createGatewayApp>;
  beforeAll(async () => {
    await new Promise<void>((r) => engine.server.listen(0, "127.0.0.1", r));
    const port = (engine.server.address() as AddressInfo).port;
    app = createGatewayApp({
      cluster: readyCluster(`http://127.0.0.1:${port}`),
      log: silentLogger(),
      name: "edge",
    });
  });
  afterAll(async () => {
    engine.server.closeAllConnections();
    await new Promise<void>((r) => engine.server.close(() => r()));
  });

  const post = (path: string, body: string | Uint8Array) =>
    app.request(path, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
    });

  it("refuses a chat body nested 100k deep in a pass-through field with 400 naming the limit (was a 500)", async () => {
    const r = await post("/v1/chat/completions", chatBody(nested(100_000)));
    expect(r.status).toBe(400);
    const body = ErrorBodySchema.parse(await r.json());
    expect(body.error.code).toBe("invalid_request");
    expect(body.error.message).toContain(`${MAX_JSON_DEPTH} levels`);
    expect(engine.received).toEqual([]);
  });

  it("counts objects and arrays alike, and ignores brackets inside strings", async () => {
    const objects = `${'{"a":'.repeat(100_000)}0${"}".repeat(100_000)}`;
    expect((await post("/v1/chat/completions", chatBody(objects))).status).toBe(400);
    // 10k brackets inside a string (with escaped quotes and backslashes) are not nesting.
    const inString = JSON.stringify(`\\"${"[{".repeat(10_000)}\\`);
    const r = await post("/v1/chat/completions", chatBody(inString));
    expect(r.status).toBe(200);
    expect(JSON.parse(engine.received.at(-1)!)).toMatchObject({ extra: JSON.parse(inString) });
  });

  it("forwards a body nested exactly to the limit intact", async () => {
    // The chat body itself is one level (the top-level object) plus the field's nesting.
    const r = await post("/v1/chat/completions", chatBody(nested(MAX_JSON_DEPTH - 1)));
    expect(r.status).toBe(200);
    expect(JSON.parse(engine.received.at(-1)!)).toMatchObject({
      extra: JSON.parse(nested(MAX_JSON_DEPTH - 1)),
    });
    expect((await post("/v1/chat/completions", chatBody(nested(MAX_JSON_DEPTH)))).status).toBe(400);
  });

  it("refuses deep nesting on every JSON endpoint, including an unbalanced body", async () => {
    for (const path of ["/place_instance", "/v1/chat/completions"]) {
      for (const text of [nested(1_000), "[".repeat(200_000)]) {
        const r = await post(path, text);
        expect(r.status).toBe(400);
        expect(ErrorBodySchema.parse(await r.json()).error.code).toBe("invalid_request");
      }
    }
  });

  it("refuses a body that is not valid UTF-8 instead of silently replacing its bytes", async () => {
    const text = Buffer.from(chatBody('"x"'));
    const bad = Buffer.concat([
      text.subarray(0, text.length - 3),
      Buffer.from([0xff, 0xfe]),
      text.subarray(text.length - 3),
    ]);
    const r = await post("/v1/chat/completions", bad);
    expect(r.status).toBe(400);
    const body = ErrorBodySchema.parse(await r.json());
    expect(body.error).toMatchObject({ code: "invalid_request" });
    expect(body.error.message).toMatch(/UTF-8/);
  });
});

describe("nestedDeeperThan (the byte scan before JSON.parse)", () => {
  const depth = (v: unknown): number =>
    typeof v === "object" && v !== null ? 1 + Math.max(0, ...Object.values(v).map(depth)) : 0;
  // Strings made of the characters that could fool a scan: quotes, backslashes, brackets, multi-byte.
  const tricky = fc.string({
    unit: fc.constantFrom('"', "\\", "[", "]", "{", "}", "a", "é", "😀", "\u2028", "\ud800"),
    maxLength: 8,
  });
  const value = fc.letrec((tie) => ({
    node: fc.oneof(
      { depthSize: "small" },
      tricky,
      fc.integer(),
      fc.constant(null),
      fc.array(tie("node"), { maxLength: 3 }),
      fc.dictionary(tricky, tie("node"), { maxKeys: 3 }),
    ),
  })).node;

  it("agrees with the depth of the parsed value for every limit", () => {
    fc.assert(
      fc.property(value, fc.nat({ max: 8 }), (v, limit) => {
        const text = JSON.stringify(v);
        expect(nestedDeeperThan(Buffer.from(text), limit)).toBe(depth(v) > limit);
      }),
      { seed: 20_251_122, numRuns: 2000 },
    );
  });
});
