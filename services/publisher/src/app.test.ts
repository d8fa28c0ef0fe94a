import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Hono } from "hono";
import { silentLogger } from "@ic/log";
import { freePort } from "@ic/testkit";
import { createPublisherApp, MAX_BODY_BYTES } from "./app.ts";
import { Catalog } from "./catalog.ts";
import { FakeClock } from "@ic/protocol";
import { PUBLIC_DIR } from "./config.ts";
import { Detector } from "./detector.ts";
import { createHubClient } from "./hub-client.ts";
import { JobManager } from "./jobs.ts";
import type { JobContext } from "./publish.ts";
import { TokenStore } from "./token-store.ts";

/** Job bodies the test releases by hand. */
class Gates {
  private readonly open: (() => void)[] = [];
  body = (ctx: JobContext): Promise<void> =>
    new Promise((resolve) => {
      ctx.log("finding shards of a/b");
      this.open.push(resolve);
    });
  releaseAll(): void {
    for (const r of this.open.splice(0)) r();
  }
}

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

/** A request body of `total` bytes (`{"url":"aaa…`) that records how much of it was read. */
function countedBody(total: number): { body: ReadableStream<Uint8Array>; pulled: () => number } {
  const chunk = 64 * 1024;
  let pulled = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (pulled >= total) {
        controller.close();
        return;
      }
      const bytes = new Uint8Array(Math.min(chunk, total - pulled)).fill(0x61);
      if (pulled === 0) bytes.set(new TextEncoder().encode('{"url":"'));
      pulled += bytes.byteLength;
      controller.enqueue(bytes);
    },
  });
  return { body, pulled: () => pulled };
}

describe("publisher API routes", () => {
  let dir: string;
  let app: Hono;
  let tokens: TokenStore;
  let jobs: JobManager;
  let gates: Gates;
  let catalogPath: string;
  let hubUrl: string;

  const post = (
    path: string,
    body: unknown,
    headers: Record<string, string> = {},
  ): Promise<Response> | Response =>
    app.request(path, {
      method: "POST",
      headers: { "Content-Type": "application/json", ...headers },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "publisher-app-"));
    catalogPath = join(dir, "catalog.yaml");
    await writeFile(
      catalogPath,
      [
        "- key: tiny-q4k",
        "  hf_repo: q/Tiny-Q4K",
        "  source_model: a/Tiny",
        "  tier: full",
        "- key: tiny-es-q4k",
        "  hf_repo: q/Tiny-es-Q4K",
        "  source_model: a/Tiny",
        "  tier: expert-server",
        "",
      ].join("\n"),
    );
    const log = silentLogger();
    tokens = new TokenStore({ configDir: join(dir, "config"), log });
    await tokens.load();
    jobs = new JobManager({ clock: new FakeClock(), log, secret: () => tokens.get() });
    gates = new Gates();
    // A port nothing listens on: every hub call fails like an unreachable hub (ECONNREFUSED).
    hubUrl = `http://127.0.0.1:${await freePort()}`;
    const hub = createHubClient({ hubUrl, token: () => tokens.get() });
    app = createPublisherApp({
      tokens,
      detector: new Detector({ hub, log }),
      jobs,
      catalog: new Catalog({ path: catalogPath, log }),
      runPublish: (_req, ctx) => gates.body(ctx),
      publicDir: PUBLIC_DIR,
      log,
      hubUrl,
    });
  });
  afterEach(async () => {
    gates.releaseAll();
    await jobs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  describe("token configuration", () => {
    it("reports no token, then a masked one after POST /api/config", async () => {
      expect(await (await app.request("/api/status")).json()).toEqual({ hf_token_set: false });
      expect(await (await app.request("/api/config")).json()).toEqual({ hf_token_masked: null });
      const res = await post("/api/config", { hf_token: " hf_abcdefghijklmnop " });
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ ok: true });
      expect(await (await app.request("/api/status")).json()).toEqual({ hf_token_set: true });
      const masked = await (await app.request("/api/config")).text();
      expect(masked).toBe(JSON.stringify({ hf_token_masked: "hf_a…mnop" }));
    });

    it.each([
      [{ hf_token: "" }, "hf_token must not be empty"],
      [{ hf_token: "   " }, "hf_token must not be empty"],
      [{}, "hf_token must not be empty"],
      [{ hf_token: 5 }, "hf_token must not be empty"],
      [{ hf_token: "hf_a b" }, "hf_token must not contain whitespace"],
      // Found by fuzzing: tokens that cannot travel in an Authorization header, or that the hub
      // library refuses, used to be saved and then turned every hub call into a 500.
      [{ hf_token: "hf_tökén" }, "hf_token must be printable ASCII"],
      [{ hf_token: "hf_\u0001abc" }, "hf_token must be printable ASCII"],
      [{ hf_token: "hf_\ud800abc" }, "hf_token must be printable ASCII"],
      [{ hf_token: "abcdefgh12345" }, 'hf_token must start with "hf_"'],
      ["{not json", "request body must be a JSON object"],
    ])("answers 400 to %j", async (body, error) => {
      const res = await post("/api/config", body);
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({ error });
      expect(tokens.get()).toBeUndefined();
    });
  });

  describe("detect and register", () => {
    it.each([
      [{ url: "" }, "url must not be empty"],
      [{ url: "   " }, "url must not be empty"],
      [
        { url: "just-a-name" },
        'cannot parse a model id from "just-a-name"; use owner/repo or a model-hub URL',
      ],
      [{}, "url must be a string"],
    ])("POST /api/detect answers 400 to %j", async (body, error) => {
      const res = await post("/api/detect", body);
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({ error });
    });

    it("POST /api/detect answers 500 with an error string when the hub fails", async () => {
      const res = await post("/api/detect", { url: "a/b" });
      expect(res.status).toBe(500);
      const body = (await res.json()) as Record<string, unknown>;
      expect(Object.keys(body)).toEqual(["error"]);
      expect(typeof body["error"]).toBe("string");
    });

    it("POST /api/register answers 400 to an invalid url and 500 when detection fails", async () => {
      expect((await post("/api/register", { url: "https://example.com/a/b" })).status).toBe(400);
      const res = await post("/api/register", { url: "a/b" });
      expect(res.status).toBe(500);
      expect(Object.keys((await res.json()) as object)).toEqual(["error"]);
    });

    it.each([
      ["/api/detect", "detecting a/b"],
      ["/api/register", "registering a/b"],
    ])(
      "%s names the phase, the hub URL and the cause when the hub is unreachable, never the token",
      async (path, phase) => {
        await tokens.set("hf_secret_token_for_tests");
        const res = await post(path, { url: "a/b" });
        expect(res.status).toBe(500);
        const { error } = (await res.json()) as { error: string };
        expect(error).toContain(phase);
        expect(error).toContain(hubUrl);
        expect(error).toMatch(/ECONNREFUSED/);
        expect(error).not.toContain("hf_secret_token_for_tests");
      },
    );
  });

  describe("publish and stream", () => {
    it("requires a configured token (400)", async () => {
      const res = await post("/api/publish", { base_model: "a/b", sidecar_repo: "c/d" });
      expect(res.status).toBe(400);
      expect(((await res.json()) as { error: string }).error).toMatch(
        /no model-hub token configured/,
      );
    });

    it.each([
      [{ base_model: "a/b" }, "base_model and sidecar_repo must be strings"],
      [
        { base_model: "nope", sidecar_repo: "c/d" },
        "base_model must be a model id (owner/repo) or model-hub URL",
      ],
      [
        { base_model: "a/b", sidecar_repo: "https://huggingface.co/c/d" },
        "sidecar_repo must be a repo id (owner/repo)",
      ],
    ])("answers 400 to %j", async (body, error) => {
      await tokens.set("hf_token_for_tests");
      const res = await post("/api/publish", body);
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({ error });
    });

    it("returns a job id at once and answers 429 to a third job while two run", async () => {
      await tokens.set("hf_token_for_tests");
      const ids: string[] = [];
      for (let i = 0; i < 2; i++) {
        const res = await post("/api/publish", { base_model: "a/b", sidecar_repo: `c/d${i}` });
        expect(res.status).toBe(200);
        const body = (await res.json()) as { job_id: string };
        expect(Object.keys(body)).toEqual(["job_id"]);
        ids.push(body.job_id);
      }
      const third = await post("/api/publish", { base_model: "a/b", sidecar_repo: "c/d3" });
      expect(third.status).toBe(429);
      expect(await third.json()).toEqual({
        error: "2 publish jobs already running; retry when one finishes",
      });
      gates.releaseAll();
      await tick();
      expect((await post("/api/publish", { base_model: "a/b", sidecar_repo: "c/d3" })).status).toBe(
        200,
      );
    });

    it("returns the running job to a repeated publish of the same base and sidecar (double click)", async () => {
      await tokens.set("hf_token_for_tests");
      const body = { base_model: "a/b", sidecar_repo: "c/d" };
      const [first, second] = await Promise.all([
        post("/api/publish", body),
        post("/api/publish", body),
      ]);
      expect(first.status).toBe(200);
      expect(second.status).toBe(200);
      const id = ((await first.json()) as { job_id: string }).job_id;
      expect(await second.json()).toEqual({ job_id: id });
      // The same repos spelled differently are the same request.
      const third = await post("/api/publish", {
        base_model: "https://huggingface.co/A/B",
        sidecar_repo: "C/D",
      });
      expect(await third.json()).toEqual({ job_id: id });
      expect(jobs.runningCount()).toBe(1);
      gates.releaseAll();
      await tick();
      const after = (await (await post("/api/publish", body)).json()) as { job_id: string };
      expect(after.job_id).not.toBe(id);
    });

    it("answers 409 with the running job id when another base is being published to the same sidecar repo", async () => {
      await tokens.set("hf_token_for_tests");
      const running = (await (
        await post("/api/publish", { base_model: "a/b", sidecar_repo: "c/d" })
      ).json()) as { job_id: string };
      const res = await post("/api/publish", { base_model: "x/y", sidecar_repo: "c/d" });
      expect(res.status).toBe(409);
      expect(await res.json()).toEqual({
        error: `a publish job to c/d is already running (job ${running.job_id}); wait for it to finish`,
        job_id: running.job_id,
      });
      expect(jobs.runningCount()).toBe(1);
    });

    it("streams the job log as SSE with the documented headers, ending with [done]", async () => {
      await tokens.set("hf_token_for_tests");
      const { job_id } = (await (
        await post("/api/publish", { base_model: "a/b", sidecar_repo: "c/d" })
      ).json()) as {
        job_id: string;
      };
      const res = await app.request(`/api/stream/${job_id}`);
      expect(res.status).toBe(200);
      expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
      expect(res.headers.get("cache-control")).toBe("no-cache");
      expect(res.headers.get("connection")).toBe("keep-alive");
      expect(res.headers.get("x-accel-buffering")).toBe("no");
      gates.releaseAll();
      expect(await res.text()).toBe(
        "data: finding shards of a/b\n\ndata: publish complete\n\ndata: [done]\n\n",
      );
    });

    it("answers 404 job not found for an unknown job", async () => {
      const res = await app.request("/api/stream/nope");
      expect(res.status).toBe(404);
      expect(await res.json()).toEqual({ error: "job not found" });
    });
  });

  describe("request body limit", () => {
    it("answers 413 to a declared Content-Length over the limit without reading the body", async () => {
      const { body, pulled } = countedBody(8 * 1024 * 1024);
      const res = await app.request("/api/detect", {
        method: "POST",
        headers: {
          "Content-Type": "application/json",
          "Content-Length": String(200 * 1024 * 1024),
        },
        body,
        duplex: "half",
      } as RequestInit);
      expect(res.status).toBe(413);
      expect(await res.json()).toEqual({
        error: `request body is larger than ${MAX_BODY_BYTES} bytes`,
      });
      expect(pulled()).toBeLessThanOrEqual(64 * 1024);
    });

    it.each(["/api/detect", "/api/config", "/api/publish", "/api/register", "/api/catalog/find"])(
      "%s answers 413 to a chunked body over the limit after reading no more than the limit",
      async (path) => {
        await tokens.set("hf_token_for_tests");
        const { body, pulled } = countedBody(8 * 1024 * 1024);
        const res = await app.request(path, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body,
          duplex: "half",
        } as RequestInit);
        expect(res.status).toBe(413);
        expect(await res.json()).toEqual({
          error: `request body is larger than ${MAX_BODY_BYTES} bytes`,
        });
        expect(pulled()).toBeLessThanOrEqual(MAX_BODY_BYTES + 64 * 1024);
      },
    );

    it("accepts a body just under the limit", async () => {
      const url = "x/y";
      const pad = "p".repeat(MAX_BODY_BYTES - 100);
      const res = await post("/api/catalog/find", { url, pad });
      expect(res.status).toBe(404);
      expect(((await res.json()) as { source_model: string }).source_model).toBe(url);
    });
  });

  describe("catalog lookup", () => {
    it("returns every entry of the source model (one-to-many)", async () => {
      const res = await post("/api/catalog/find", { url: "https://huggingface.co/a/Tiny" });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { source_model: string; entries: { key: string }[] };
      expect(body.source_model).toBe("a/Tiny");
      expect(body.entries.map((e) => e.key)).toEqual(["tiny-q4k", "tiny-es-q4k"]);
    });

    it("answers 404 with source_model on a miss, 400 on bad input, 500 when the catalog is broken", async () => {
      const miss = await post("/api/catalog/find", { url: "x/y" });
      expect(miss.status).toBe(404);
      expect(await miss.json()).toEqual({
        error: "no catalog entry has source model x/y",
        source_model: "x/y",
      });
      expect((await post("/api/catalog/find", { url: "" })).status).toBe(400);
      expect((await post("/api/catalog/find", { url: "x/y/z" })).status).toBe(400);
      await writeFile(catalogPath, "- [broken\n");
      const broken = await post("/api/catalog/find", { url: "x/y" });
      expect(broken.status).toBe(500);
      expect(((await broken.json()) as { error: string }).error).toMatch(
        /^catalog .* failed to load/,
      );
    });
  });

  describe("routing and local-only protection", () => {
    it("keeps /api/* ahead of the GUI and answers unknown API paths with the JSON envelope", async () => {
      const unknown = await app.request("/api/nope");
      expect(unknown.status).toBe(404);
      expect(await unknown.json()).toEqual({ error: "not found" });
      expect((await app.request("/api/publish")).status).toBe(404);
      const page = await app.request("/");
      expect(page.status).toBe(200);
      expect(page.headers.get("content-type")).toMatch(/^text\/html/);
      expect(page.headers.get("content-security-policy")).toContain("frame-ancestors 'none'");
      expect(await page.text()).toContain("<title>Weights Publisher</title>");
      expect((await app.request("/app.js")).headers.get("content-type")).toMatch(/javascript/);
      expect((await app.request("/../package.json")).status).toBe(404);
    });

    it.each([
      ["GET", "/favicon.ico"],
      ["GET", "/%2e%2e/%2e%2e/package.json"],
      ["GET", "/constructor"],
      ["PUT", "/"],
      ["DELETE", "/app.js"],
    ])("answers %s %s outside the GUI's files with the JSON 404 envelope", async (method, path) => {
      const res = await app.request(path, { method });
      expect(res.status).toBe(404);
      expect(res.headers.get("content-type")).toMatch(/^application\/json/);
      expect(await res.json()).toEqual({ error: "not found" });
    });

    it.each([
      ["a foreign Host", "http://attacker.example/api/status", {}],
      ["a rebound name on the loopback port", "http://rebind.attacker.example:7861/api/status", {}],
      [
        "a cross-site Origin",
        "http://localhost/api/status",
        { Origin: "https://attacker.example" },
      ],
      ["an opaque Origin", "http://localhost/api/status", { Origin: "null" }],
      [
        "Sec-Fetch-Site: cross-site",
        "http://127.0.0.1/api/status",
        { "Sec-Fetch-Site": "cross-site" },
      ],
    ])("refuses %s with 403", async (_n, url, headers) => {
      const res = await app.request(url, { headers });
      expect(res.status).toBe(403);
      expect(Object.keys((await res.json()) as object)).toEqual(["error"]);
    });

    it.each([
      ["http://localhost:7861/api/status", { Origin: "http://localhost:7861" }],
      [
        "http://127.0.0.1:7861/api/status",
        { Origin: "http://127.0.0.1:7861", "Sec-Fetch-Site": "same-origin" },
      ],
      ["http://[::1]:7861/api/status", {}],
    ])("serves %s", async (url, headers) => {
      expect((await app.request(url, { headers })).status).toBe(200);
    });
  });
});
