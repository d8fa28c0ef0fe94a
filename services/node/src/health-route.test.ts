// GET /health through the gateway app as node.ts wires it (tokens configured): public, 200 only for
// a started node in a synced session, 503 in the error envelope saying why otherwise.
import type { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { createNodeApp, routesOf } from "@ic/http";
import { silentLogger } from "@ic/log";
import { ErrorBodySchema } from "@ic/protocol";
import { HEALTH_PATH, healthOf, healthRoutes } from "./health-route.ts";
import type { HealthAgent, NodePhase } from "./health-route.ts";

const TOKEN = "read-token-0123456789";

/** What the route reads of the cluster agent and the node, changed by each test. */
class Fixture {
  phase: NodePhase = "starting";
  /** Read by the route on every request, like the cluster agent's getters. */
  readonly agent: { -readonly [K in keyof HealthAgent]: HealthAgent[K] } = {
    synced: false,
    sessionId: null,
    isMaster: false,
  };
  readonly app: Hono;
  constructor() {
    this.app = createNodeApp(
      { auth: { tokens: [{ name: "dash", token: TOKEN, scopes: ["read"] }] }, log: silentLogger() },
      [
        {
          routes: () =>
            routesOf((a) =>
              healthRoutes(a, { agent: this.agent, name: "node-1", phase: () => this.phase }),
            ),
        },
      ],
    );
  }
  get(method = "GET", headers: Record<string, string> = {}) {
    return this.app.request(`http://node-1:8080${HEALTH_PATH}`, {
      method,
      headers: { host: "node-1:8080", ...headers },
    });
  }
}

async function unavailable(r: Response): Promise<{ message: string; reason: unknown }> {
  expect(r.status).toBe(503);
  const body = ErrorBodySchema.parse(await r.json());
  expect(body.error).toMatchObject({ code: "unavailable", retryable: true });
  return { message: body.error.message, reason: body.error.details?.reason };
}

describe("GET /health", () => {
  it("is 503 `starting` while the node starts, without a token", async () => {
    const fx = new Fixture();
    const r = await fx.get();
    expect(r.headers.get("retry-after")).toBe("1");
    expect(await unavailable(r)).toEqual({
      message: "node node-1 is starting",
      reason: "starting",
    });
  });

  it("is 503 until the cluster agent is in a session and holds its state", async () => {
    const fx = new Fixture();
    fx.phase = "started";
    expect(await unavailable(await fx.get())).toEqual({
      message: "node node-1 is not in a session yet (waiting for the election)",
      reason: "no_session",
    });
    Object.assign(fx.agent, { sessionId: "s-1" });
    expect(await unavailable(await fx.get())).toEqual({
      message: "node node-1 is joining session s-1 (its state is not synced yet)",
      reason: "syncing",
    });
  });

  it("is 200 {ok: true} once started and synced, for anyone (GET and HEAD)", async () => {
    const fx = new Fixture();
    fx.phase = "started";
    Object.assign(fx.agent, { synced: true, sessionId: "s-1", isMaster: true });
    const r = await fx.get();
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({
      ok: true,
      node: "node-1",
      session_id: "s-1",
      is_master: true,
    });
    expect((await fx.get("HEAD")).status).toBe(200);
    // A token, when one is sent anyway, changes nothing.
    expect((await fx.get("GET", { authorization: `Bearer ${TOKEN}` })).status).toBe(200);
  });

  it("goes back to 503 when the node stops or leaves its session", async () => {
    const fx = new Fixture();
    fx.phase = "started";
    Object.assign(fx.agent, { synced: true, sessionId: "s-1", isMaster: false });
    expect((await fx.get()).status).toBe(200);
    Object.assign(fx.agent, { synced: false, sessionId: "s-2", isMaster: false });
    expect((await unavailable(await fx.get())).reason).toBe("syncing");
    Object.assign(fx.agent, { synced: true, sessionId: "s-2", isMaster: false });
    // Draining: load balancers stop sending (503, no Retry-After: it will not come back by itself).
    fx.phase = "draining";
    const d = await fx.get();
    expect(d.headers.get("retry-after")).toBeNull();
    expect((await unavailable(d)).reason).toBe("draining");
    fx.phase = "stopping";
    const r = await fx.get();
    expect(r.headers.get("retry-after")).toBeNull();
    expect(await unavailable(r)).toEqual({
      message: "node node-1 is stopping",
      reason: "stopping",
    });
  });

  it("other methods are not public: they need a token like any admin request", async () => {
    const fx = new Fixture();
    fx.phase = "started";
    Object.assign(fx.agent, { synced: true, sessionId: "s-1", isMaster: false });
    const r = await fx.get("POST", { "content-type": "application/json" });
    expect(r.status).toBe(401);
  });
});

describe("healthOf", () => {
  const synced = { synced: true, sessionId: "s-1", isMaster: false };
  it.each([
    ["starting", synced, "starting"],
    ["stopping", synced, "stopping"],
    ["draining", synced, "draining"],
    ["started", { synced: false, sessionId: null, isMaster: false }, "no_session"],
    ["started", { synced: false, sessionId: "s-1", isMaster: false }, "syncing"],
    ["started", { ...synced, unheardMembers: () => ["node-3"] }, "syncing"],
    ["started", { ...synced, unheardMembers: () => [] }, "healthy"],
    ["started", synced, "healthy"],
  ] as const)("%s, %j -> %s", (phase, agent, want) => {
    const h = healthOf(phase, agent, "n");
    expect("healthy" in h ? "healthy" : h.reason).toBe(want);
  });
});
