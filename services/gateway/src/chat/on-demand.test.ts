// Loading on demand at the gateway, against a scripted engine and a scripted cluster whose master
// "places" the model when asked: a burst asks once and every request is answered once the instance is
// ready; a stream that waits gets its 200 and SSE comments, then the answer; a refusal, a failed
// runner and the load wait each end the request with their typed error; without on demand the spec's
// 404 stands; GET /v1/models lists a model that loads.
import { afterEach, describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import { ServiceError, runnerKey } from "@ic/protocol";
import type { Command, ModelRecord } from "@ic/protocol";
import { createGatewayApp } from "../app.ts";
import type { ChatLimits } from "./request.ts";
import { closers, cluster, engine, errorOf, INSTANCE, listen, MODEL } from "../testing/scripted.ts";

afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

const ANSWER = {
  id: "x",
  object: "chat.completion",
  choices: [{ index: 0, message: { role: "assistant", content: "hello" } }],
};

interface World {
  /** How the master answers a LoadModel: after `readyAfterMs` the instance is ready, or it refuses. */
  readonly readyAfterMs?: number;
  readonly refuse?: ServiceError;
  /** The runner gives up instead of becoming ready. */
  readonly fails?: boolean;
  readonly model?: Partial<ModelRecord>;
  readonly limits?: Partial<ChatLimits>;
}

/** A cluster with MODEL registered and nothing serving it; its master loads it when asked. */
async function world(w: World = {}) {
  const eng = await engine((_req, res, body) => {
    const stream = (JSON.parse(body) as { stream?: boolean }).stream;
    if (!stream)
      return void res
        .writeHead(200, { "content-type": "application/json" })
        .end(JSON.stringify(ANSWER));
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.write(
      `data: ${JSON.stringify({ id: "x", choices: [{ index: 0, delta: { content: "hello" } }] })}\n\n`,
    );
    res.end("data: [DONE]\n\n");
  });
  const c = cluster(eng.url);
  const state = c.view.snapshot();
  const instance = state.instances[INSTANCE]!;
  const runner = state.runners[runnerKey(INSTANCE, 0)]!;
  delete state.instances[INSTANCE];
  delete state.runners[runnerKey(INSTANCE, 0)];
  state.models[MODEL] = { ...state.models[MODEL]!, ...w.model };
  const loads: Command[] = [];
  const command = c.view.command;
  c.view.command = async (cmd) => {
    if (cmd.type !== "LoadModel") return command(cmd);
    loads.push(cmd);
    if (w.refuse) throw w.refuse;
    // Placed now (the deployment, the instance staging); ready, or failed, a little later.
    state.deployments["d-1"] = {
      deployment_id: "d-1",
      model_id: MODEL,
      min_nodes: 1,
      sharding: "Pipeline",
      on_demand: true,
      keep_alive_ms: cmd.keep_alive_ms,
      excluded_peer_keys: [],
      created_at: 0,
      instance_id: INSTANCE,
      status: "Placed",
    };
    state.instances[INSTANCE] = instance;
    state.runners[runnerKey(INSTANCE, 0)] = { ...runner, state: "RunnerStaging" };
    setTimeout(() => {
      if (!w.fails) return void (state.runners[runnerKey(INSTANCE, 0)] = runner);
      // As the master gives up a deployment that failed on every node it was tried on.
      delete state.instances[INSTANCE];
      delete state.runners[runnerKey(INSTANCE, 0)];
      state.deployments["d-1"] = {
        ...state.deployments["d-1"]!,
        status: "Failed",
        refusal: {
          code: "failed",
          message: "org/tiny failed to run on every node: the model would not load",
        },
      };
    }, w.readyAfterMs ?? 300);
    return { ok: true, index: 1 };
  };
  const app = createGatewayApp({
    cluster: c.view,
    log: silentLogger(),
    name: "t",
    chat: { on_demand: true, keep_alive_ms: 60_000, ...w.limits },
  });
  const base = await listen(app);
  const chat = async (body: Record<string, unknown> = {}) => {
    const r = await fetch(`${base}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }], ...body }),
    });
    return { status: r.status, text: await r.text() };
  };
  return { chat, loads, base, state };
}

describe("loading on demand", () => {
  it("a burst of first requests asks once, and each is answered once the instance is ready", async () => {
    const w = await world();
    const answers = await Promise.all([1, 2, 3, 4].map(() => w.chat()));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200]);
    expect(answers.every((a) => a.text.includes("hello"))).toBe(true);
    expect(w.loads).toEqual([{ type: "LoadModel", model_id: MODEL, keep_alive_ms: 60_000 }]);
  });

  it("model.json's keep_alive is the one the load asks for", async () => {
    const w = await world({ model: { keep_alive_ms: 0 } });
    expect((await w.chat()).status).toBe(200);
    expect(w.loads).toMatchObject([{ keep_alive_ms: 0 }]);
  });

  it("a stream that waits gets its 200 and comments saying how far the load is, then its answer", async () => {
    const w = await world({ readyAfterMs: 2400 });
    const r = await w.chat({ stream: true });
    expect(r.status).toBe(200);
    expect(r.text).toMatch(/^: loading: org\/tiny is staging on /);
    expect(r.text).toContain('"content":"hello"');
    expect(r.text.trimEnd().endsWith("data: [DONE]")).toBe(true);
  });

  it("a placement refusal is the request's typed error, with the figures", async () => {
    const refusal = new ServiceError(
      "insufficient_memory",
      "node node-1 cannot fit: needs 9 GB, has 2 GB",
    );
    const w = await world({ refuse: refusal });
    const r = await w.chat();
    expect(r.status).toBe(400);
    expect(errorOf(r.text)).toMatchObject({
      code: "insufficient_memory",
      message: refusal.message,
    });
  });

  it("a runner that fails ends the wait with its error, in the stream once it has its 200", async () => {
    const w = await world({ fails: true, readyAfterMs: 2200 });
    const r = await w.chat({ stream: true });
    expect(r.status).toBe(200);
    expect(r.text).toContain(": loading:");
    expect(r.text).toMatch(/data: \{"error":\{"code":"model_not_ready".*the model would not load/);
  });

  it("outlasting chat.load_wait_ms is a retryable model_not_ready", async () => {
    const w = await world({ readyAfterMs: 5000, limits: { load_wait_ms: 400 } });
    const r = await w.chat();
    expect(r.status).toBe(404);
    expect(errorOf(r.text)).toMatchObject({ code: "model_not_ready", retryable: true });
    expect(errorOf(r.text).message).toContain("not ready within 0 s (chat.load_wait_ms)");
  });

  it("without on demand (the model's own false wins), the spec's 404 stands and nothing loads", async () => {
    const w = await world({ model: { on_demand: false } });
    const r = await w.chat();
    expect(r.status).toBe(404);
    expect(errorOf(r.text).code).toBe("model_not_found");
    expect(w.loads).toEqual([]);
  });

  it("GET /v1/models lists a model that loads, not loaded, then loaded", async () => {
    const w = await world();
    const list = async () =>
      ((await (await fetch(`${w.base}/v1/models`)).json()) as { data: unknown[] }).data;
    expect(await list()).toEqual([
      expect.objectContaining({
        id: MODEL,
        loaded: false,
        kinds: [],
        capabilities: ["completion"],
      }),
    ]);
    await w.chat();
    expect(await list()).toEqual([
      expect.objectContaining({ id: MODEL, loaded: true, kinds: ["generate"] }),
    ]);
  });
});
