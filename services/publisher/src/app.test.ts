import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Hono } from "hono";
import { silentLogger } from "@ic/log";
import { createPublisherApp } from "./app.ts";
import { Catalog } from "./catalog.ts";
import { FakeClock } from "./clock.ts";
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

describe("publisher API routes", () => {
  let dir: string;
  let app: Hono;
  let tokens: TokenStore;
  let jobs: JobManager;
  let gates: Gates;
  let catalogPath: string;

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
    // Nothing listens on port 9: every hub call fails like an unreachable hub.
    const hub = createHubClient({ hubUrl: "http://127.0.0.1:9", token: () => tokens.get() });
    app = createPublisherApp({
      tokens,
      detector: new Detector({ hub, log }),
      jobs,
      catalog: new Catalog({ path: catalogPath, log }),
      startPublish: (req) => jobs.start(`${req.baseModel}`, gates.body),
      publicDir: PUBLIC_DIR,
      log,
      hubUrl: "http://127.0.0.1:9",
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
