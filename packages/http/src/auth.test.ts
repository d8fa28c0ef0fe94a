import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import { authMiddleware, globToRegExp, mayUseModel, scopeFor, TokenSet } from "./auth.ts";
import type { ApiToken } from "./auth.ts";
import { toResponse } from "./errors.ts";

const ADMIN = "admin-token-0123456789";
const READER = "read-token-0123456789";
const APP = "inference-token-0123456789";
const tokens: ApiToken[] = [
  { name: "ops", token: ADMIN, scopes: ["admin", "read", "inference"] },
  { name: "dash", token: READER, scopes: ["read"] },
  { name: "app", token: APP, scopes: ["inference"] },
];

/** The node's mutating endpoints, with the scope each needs. */
const MUTATING = [
  { method: "POST", path: "/place_instance", scope: "admin" },
  { method: "DELETE", path: "/instance/i-1", scope: "admin" },
  { method: "POST", path: "/admin/restart", scope: "admin" },
  { method: "POST", path: "/admin/drain", scope: "admin" },
  { method: "POST", path: "/store/purge-staging", scope: "admin" },
  { method: "PUT", path: "/v1/tracing", scope: "admin" },
  { method: "PUT", path: "/admin/settings", scope: "admin" },
  { method: "POST", path: "/v1/chat/completions", scope: "inference" },
] as const;

/** Every route answers 200 {ok} past the middleware, with the one error handler of the gateway. */
function app(t: readonly ApiToken[] = tokens): Hono {
  const a = new Hono();
  a.onError((err, c) => toResponse(c, err, silentLogger()));
  a.use("*", authMiddleware({ tokens: t }));
  a.all("*", (c) => c.json({ ok: true }));
  return a;
}

function call(
  method: string,
  path: string,
  h: Record<string, string> = {},
  body: string | null = method === "GET" || method === "DELETE" ? null : "{}",
) {
  return app().request(`http://node-1:8080${path}`, {
    method,
    headers: { host: "node-1:8080", ...h },
    ...(body !== null ? { body } : {}),
  });
}

const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
const json = { "content-type": "application/json" };

async function code(r: Response): Promise<string> {
  return ((await r.json()) as { error: { code: string } }).error.code;
}

describe("scopeFor: which scope each endpoint needs", () => {
  it.each([
    ["GET", "/state", "read"],
    ["GET", "/events", "read"],
    ["GET", "/store/storage", "read"],
    ["GET", "/store/models/org--m/manifest", "read"],
    ["GET", "/instance/previews", "read"],
    ["GET", "/v1/tracing", "read"],
    ["GET", "/v1/traces/cluster", "read"],
    ["GET", "/v1/diagnostics/telemetry", "read"],
    ["GET", "/v1/models", "inference"],
    ["POST", "/v1/chat/completions", "inference"],
    ["POST", "/v1/messages", "inference"],
    ["POST", "/v1/responses", "inference"],
    // llama-server's rerank names outside /v1 are inference too; other paths there are not.
    ["POST", "/rerank", "inference"],
    ["POST", "/reranking", "inference"],
    ["POST", "/completion", "admin"],
    ["PUT", "/v1/tracing", "admin"],
    ["POST", "/place_instance", "admin"],
    ["DELETE", "/instance/i-1", "admin"],
    ["POST", "/admin/restart", "admin"],
    ["POST", "/store/purge-staging", "admin"],
    ["GET", "/v1/ping", null],
    ["HEAD", "/v1/ping", null],
    // Only GET is public: any other method on the ping path is an /v1/ request like the rest.
    ["OPTIONS", "/v1/ping", "inference"],
    ["POST", "/v1/ping", "inference"],
    ["GET", "/health", null],
    ["HEAD", "/health", null],
    // Outside /v1/, any other method on the health path is an admin request.
    ["POST", "/health", "admin"],
    ["GET", "/health/", "read"],
    ["GET", "/healthz", "read"],
    ["GET", "/openapi.json", null],
    ["POST", "/openapi.json", "admin"],
    ["POST", "/store/pulls", "admin"],
    ["GET", "/store/pulls", "read"],
    ["DELETE", "/store/pulls/acme/x", "admin"],
    ["DELETE", "/store/models/acme/x", "admin"],
    // The dashboard's static page is public; its data and the settings editor are not.
    ["GET", "/", null],
    ["GET", "/dashboard/app.js", null],
    ["POST", "/", "admin"],
    ["GET", "/state/stream", "read"],
    ["GET", "/store/storage/cluster", "read"],
    ["GET", "/admin/settings", "read"],
    ["PUT", "/admin/settings", "admin"],
  ])("%s %s -> %s", (method, path, scope) => {
    expect(scopeFor(method, path)).toBe(scope);
  });
});

describe("auth middleware on every mutating endpoint", () => {
  it.each(MUTATING)("$method $path: 401 without a token, with the envelope", async (e) => {
    const r = await call(e.method, e.path, json);
    expect(r.status).toBe(401);
    expect(r.headers.get("www-authenticate")).toMatch(/^Bearer/);
    expect(await r.json()).toMatchObject({
      error: { code: "unauthorized", type: "authentication_error", retryable: false },
    });
    expect(
      (await call(e.method, e.path, { ...json, ...bearer("not-a-token-at-all") })).status,
    ).toBe(401);
  });

  it.each(MUTATING)("$method $path: 403 with a token of the wrong scope", async (e) => {
    const wrong = e.scope === "admin" ? APP : READER;
    const r = await call(e.method, e.path, { ...json, ...bearer(wrong) });
    expect(r.status).toBe(403);
    expect(await code(r)).toBe("forbidden");
  });

  it.each(MUTATING)("$method $path: 415 for text/plain even with the right token", async (e) => {
    const r = await call(e.method, e.path, { "content-type": "text/plain", ...bearer(ADMIN) });
    expect(r.status).toBe(415);
    expect(await r.json()).toMatchObject({
      error: { code: "unsupported_media_type", type: "invalid_request_error" },
    });
  });

  it.each(MUTATING)("$method $path: 403 for a foreign Origin", async (e) => {
    const r = await call(e.method, e.path, {
      ...json,
      ...bearer(ADMIN),
      origin: "http://evil.example",
    });
    expect(r.status).toBe(403);
    expect(await code(r)).toBe("forbidden");
  });

  it.each(MUTATING)("$method $path: passes with the right token and JSON", async (e) => {
    const r = await call(e.method, e.path, { ...json, ...bearer(ADMIN) });
    expect(r.status).toBe(200);
    // The node's own pages (same origin) may call it.
    const same = await call(e.method, e.path, {
      ...json,
      ...bearer(ADMIN),
      origin: "http://node-1:8080",
    });
    expect(same.status).toBe(200);
  });
});

describe("Anthropic's x-api-key", () => {
  const post = (path: string, h: Record<string, string>) => call("POST", path, { ...json, ...h });

  it("is taken as the token on inference paths, in Anthropic's error envelope when it fails", async () => {
    expect((await post("/v1/messages", { "x-api-key": APP })).status).toBe(200);
    const unknown = await post("/v1/messages", { "x-api-key": "not-a-token-at-all" });
    expect(unknown.status).toBe(401);
    expect(await unknown.json()).toMatchObject({
      type: "error",
      error: {
        type: "authentication_error",
        code: "unauthorized",
        message: "unknown bearer token",
      },
    });
    // A reader's key has no inference scope, whichever header carries it.
    const reader = await post("/v1/messages", { "x-api-key": READER });
    expect(reader.status).toBe(403);
    expect(await reader.json()).toMatchObject({
      type: "error",
      error: { type: "permission_error" },
    });
  });

  it("is not taken for admin paths, nor over an Authorization header", async () => {
    expect((await post("/place_instance", { "x-api-key": ADMIN })).status).toBe(401);
    expect(
      (await post("/v1/messages", { "x-api-key": APP, authorization: "Bearer not-a-token-at-all" }))
        .status,
    ).toBe(401);
  });
});

describe("auth middleware details", () => {
  it("a bodyless POST /admin/restart needs no content type; a body without one is refused", async () => {
    expect((await call("POST", "/admin/restart", bearer(ADMIN), null)).status).toBe(200);
    const r = await app().request("http://node-1:8080/admin/restart", {
      method: "POST",
      headers: { host: "node-1:8080", ...bearer(ADMIN), "content-length": "2" },
      body: new TextEncoder().encode("{}"),
    });
    // fetch adds text/plain for a string body; a byte body goes without a type: both are refused.
    expect(r.status).toBe(415);
  });

  it("application/json with a charset is JSON", async () => {
    const r = await call("POST", "/place_instance", {
      "content-type": "application/json; charset=utf-8",
      ...bearer(ADMIN),
    });
    expect(r.status).toBe(200);
  });

  it("reads need the read scope; an inference token cannot read state", async () => {
    expect((await call("GET", "/state")).status).toBe(401);
    expect((await call("GET", "/state", bearer(APP))).status).toBe(403);
    expect((await call("GET", "/state", bearer(READER))).status).toBe(200);
    expect((await call("GET", "/v1/ping")).status).toBe(200);
    expect((await call("GET", "/health")).status).toBe(200);
  });

  it("only GET and HEAD /health are public: other methods need an admin token", async () => {
    expect((await call("HEAD", "/health", {}, null)).status).toBe(200);
    for (const method of ["POST", "PUT", "DELETE"]) {
      const r = await call(method, "/health", json);
      expect(r.status).toBe(401);
      expect(await code(r)).toBe("unauthorized");
    }
    expect((await call("POST", "/health", { ...json, ...bearer(READER) })).status).toBe(403);
  });

  it("only GET /v1/ping is public: other methods on it need a token like any /v1/ request", async () => {
    for (const method of ["OPTIONS", "POST", "DELETE"]) {
      const r = await call(method, "/v1/ping", json);
      expect(r.status).toBe(401);
      expect(await code(r)).toBe("unauthorized");
    }
    // The router decodes the path; so does the scope check.
    expect((await call("OPTIONS", "/v1/%70ing", json)).status).toBe(401);
  });

  it("the opaque origin `null` (sandboxed pages, file://) is refused for mutations", async () => {
    const r = await call("POST", "/place_instance", {
      ...json,
      ...bearer(ADMIN),
      origin: "null",
    });
    expect(r.status).toBe(403);
  });

  it("with no tokens configured every scope is open, but bodies and origins are still checked", async () => {
    const open = app([]);
    const req = (h: Record<string, string>) =>
      open.request("http://127.0.0.1:8080/place_instance", {
        method: "POST",
        headers: { host: "127.0.0.1:8080", ...h },
        body: "{}",
      });
    expect((await req(json)).status).toBe(200);
    expect((await req({ "content-type": "text/plain" })).status).toBe(415);
    expect((await req({ ...json, origin: "http://evil.example" })).status).toBe(403);
  });
});

describe("a TokenSet replaced while the node runs (reload)", () => {
  it("takes effect on the next request: the old token refused, the new one accepted", async () => {
    const set = new TokenSet([{ name: "old", token: "old-secret-0123456789", scopes: ["read"] }]);
    const a = new Hono();
    a.onError((e, c) => toResponse(c, e, silentLogger()));
    a.use("*", authMiddleware({ tokens: set }));
    a.get("/state", (c) => c.json({ ok: true }));
    const get = (token: string) =>
      a.request("/state", { headers: { authorization: `Bearer ${token}` } });
    expect((await get("old-secret-0123456789")).status).toBe(200);
    set.set([
      { name: "old", token: "old-secret-0123456789", scopes: ["read"] },
      { name: "new", token: "new-secret-9876543210", scopes: ["read"] },
    ]);
    expect((await get("old-secret-0123456789")).status).toBe(200);
    expect((await get("new-secret-9876543210")).status).toBe(200);
    set.set([{ name: "new", token: "new-secret-9876543210", scopes: ["read"] }]);
    expect((await get("old-secret-0123456789")).status).toBe(401);
    expect((await get("new-secret-9876543210")).status).toBe(200);
    expect(set.names()).toEqual(["new"]);
  });
});

describe("model patterns of a token", () => {
  it.each([
    ["org/*", "org/tiny", true],
    ["org/*", "org/sub/deep", true], // `*` crosses `/`
    ["org/*", "other/tiny", false],
    ["*", "anything/at-all", true],
    ["org/t?ny", "org/tiny", true],
    ["org/t?ny", "org/tny", false],
    ["org/tiny", "org/tiny-2", false], // anchored at both ends
    ["org/a.b", "org/aXb", false], // `.` is literal
    ["org/(x)+[y]", "org/(x)+[y]", true], // so are the other regex characters
    ["Org/*", "org/tiny", false], // case matters, as in model ids
  ])("%s against %s: %s", (pattern, model, want) => {
    expect(globToRegExp(pattern).test(model)).toBe(want);
  });

  it("a token without patterns may use every model; with some, any one that matches", () => {
    const base = { name: "t", token: "x".repeat(16), scopes: ["inference" as const] };
    expect(mayUseModel(undefined, "org/m")).toBe(true);
    expect(mayUseModel(base, "org/m")).toBe(true);
    expect(mayUseModel({ ...base, models: ["a/*", "org/m"] }, "org/m")).toBe(true);
    expect(mayUseModel({ ...base, models: ["a/*"] }, "org/m")).toBe(false);
  });
});
