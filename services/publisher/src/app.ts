// The local HTTP API of the weights publisher (hono): seven /api paths, one error envelope,
// the job stream as Server-Sent Events, and the static single-page GUI mounted last at `/`.
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Hono } from "hono";
import type { Context } from "hono";
import { z } from "zod";
import type { Logger } from "@ic/log";
import type { Catalog } from "./catalog.ts";
import type { Detector } from "./detector.ts";
import { PublisherError, toErrorResponse } from "./errors.ts";
import { DONE_LINE } from "./jobs.ts";
import type { JobManager, JobSubscription } from "./jobs.ts";
import { localOnly } from "./local-guard.ts";
import { parseModelRef, parseRepoId } from "./model-ref.ts";
import type { PublishRequest } from "./publish.ts";
import { register } from "./registration.ts";
import type { TokenStore } from "./token-store.ts";

export interface PublisherAppDeps {
  readonly tokens: TokenStore;
  readonly detector: Detector;
  readonly jobs: JobManager;
  readonly catalog: Catalog;
  /** Starts a publish job and returns its id; throws `busy` at the concurrency limit. */
  readonly startPublish: (req: PublishRequest) => string;
  readonly publicDir: string;
  readonly log: Logger;
  /** Hub endpoint, so URLs on it parse as model URLs. */
  readonly hubUrl?: string | undefined;
  /** Interval of SSE comment lines that keep idle streams open; 15 s by default. */
  readonly heartbeatMs?: number;
}

const MAX_URL = 2048;
const ConfigBody = z.object({ hf_token: z.string() });
const UrlBody = z.object({ url: z.string().max(MAX_URL) });
const PublishBody = z.object({
  base_model: z.string().max(MAX_URL),
  sidecar_repo: z.string().max(MAX_URL),
});

const STATIC: Readonly<Record<string, { file: string; type: string }>> = {
  "/": { file: "index.html", type: "text/html; charset=utf-8" },
  "/index.html": { file: "index.html", type: "text/html; charset=utf-8" },
  "/app.js": { file: "app.js", type: "text/javascript; charset=utf-8" },
  "/style.css": { file: "style.css", type: "text/css; charset=utf-8" },
};

const CSP =
  "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
  "frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

async function jsonBody<S extends z.ZodType>(
  c: Context,
  schema: S,
  invalid: string,
): Promise<z.output<S>> {
  let raw: unknown;
  try {
    raw = await c.req.json();
  } catch {
    throw new PublisherError("bad_request", "request body must be a JSON object");
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new PublisherError("bad_request", invalid);
  return parsed.data;
}

export function createPublisherApp(d: PublisherAppDeps): Hono {
  const log = d.log.child({ component: "api" });
  const app = new Hono();
  const secret = (): string | undefined => d.tokens.get();

  app.onError((err, c) => toErrorResponse(c, err, log, secret()));
  app.use("*", async (c, next) => {
    const t0 = performance.now();
    await next();
    c.header("X-Content-Type-Options", "nosniff");
    c.header("Referrer-Policy", "no-referrer");
    log.debug(
      {
        method: c.req.method,
        path: c.req.path,
        status: c.res.status,
        ms: Math.round(performance.now() - t0),
      },
      "request",
    );
  });
  app.use("*", localOnly());
  app.use("/api/*", async (c, next) => {
    await next();
    if (!c.res.headers.get("content-type")?.startsWith("text/event-stream"))
      c.header("Cache-Control", "no-store");
  });

  const modelRef = (url: string): ReturnType<typeof parseModelRef> & {} => {
    if (url.trim() === "") throw new PublisherError("bad_request", "url must not be empty");
    const ref = parseModelRef(url, d.hubUrl);
    if (!ref)
      throw new PublisherError(
        "bad_request",
        `cannot parse a model id from "${url.trim().slice(0, 200)}"; use owner/repo or a model-hub URL`,
      );
    return ref;
  };

  app.get("/api/status", (c) => c.json({ hf_token_set: d.tokens.get() !== undefined }));

  app.get("/api/config", (c) => c.json({ hf_token_masked: d.tokens.masked() }));

  app.post("/api/config", async (c) => {
    const body = await jsonBody(c, ConfigBody, "hf_token must not be empty");
    const token = body.hf_token.trim();
    if (token === "") throw new PublisherError("bad_request", "hf_token must not be empty");
    if (/\s/.test(token))
      throw new PublisherError("bad_request", "hf_token must not contain whitespace");
    await d.tokens.set(token);
    return c.json({ ok: true });
  });

  app.post("/api/detect", async (c) => {
    const body = await jsonBody(c, UrlBody, "url must be a string");
    const ref = modelRef(body.url);
    const detection = await d.detector.detect(ref);
    return c.json(detection.result);
  });

  app.post("/api/publish", async (c) => {
    if (d.tokens.get() === undefined) {
      throw new PublisherError(
        "bad_request",
        "no model-hub token configured; set one first (POST /api/config or HF_TOKEN)",
      );
    }
    const body = await jsonBody(c, PublishBody, "base_model and sidecar_repo must be strings");
    const baseModel = parseModelRef(body.base_model, d.hubUrl);
    if (!baseModel)
      throw new PublisherError(
        "bad_request",
        "base_model must be a model id (owner/repo) or model-hub URL",
      );
    const sidecarRepo = parseRepoId(body.sidecar_repo);
    if (!sidecarRepo)
      throw new PublisherError("bad_request", "sidecar_repo must be a repo id (owner/repo)");
    const jobId = d.startPublish({ baseModel, sidecarRepo });
    return c.json({ job_id: jobId });
  });

  app.post("/api/register", async (c) => {
    const body = await jsonBody(c, UrlBody, "url must be a string");
    const ref = modelRef(body.url);
    return c.json(await register(ref, { detector: d.detector, catalog: d.catalog }));
  });

  app.post("/api/catalog/find", async (c) => {
    const body = await jsonBody(c, UrlBody, "url must be a string");
    const ref = modelRef(body.url);
    const entries = await d.catalog.find(ref);
    if (entries.length === 0) {
      throw new PublisherError("not_found", `no catalog entry has source model ${ref}`, {
        extra: { source_model: ref },
      });
    }
    return c.json({ source_model: ref, entries });
  });

  app.get("/api/stream/:id", (c) => {
    const id = c.req.param("id");
    if (d.jobs.state(id) === null) throw new PublisherError("not_found", "job not found");
    const enc = new TextEncoder();
    let sub: JobSubscription | null = null;
    let heartbeat: NodeJS.Timeout | undefined;
    let closed = false;
    const cleanup = (): void => {
      closed = true;
      sub?.unsubscribe();
      clearInterval(heartbeat);
    };
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        const send = (line: string): void => {
          if (closed) return;
          controller.enqueue(enc.encode(`data: ${line}\n\n`));
          if (line === DONE_LINE) {
            cleanup();
            controller.close();
          }
        };
        sub = d.jobs.subscribe(id, send);
        if (!sub) {
          send("[error]: job not found");
          send(DONE_LINE);
          return;
        }
        for (const line of sub.replay) send(line);
        if (!closed) {
          heartbeat = setInterval(() => {
            if (!closed) controller.enqueue(enc.encode(": keep-alive\n\n"));
          }, d.heartbeatMs ?? 15_000);
          heartbeat.unref();
        }
      },
      cancel() {
        // The client went away; the job keeps running and can be streamed again.
        cleanup();
      },
    });
    return new Response(body, {
      status: 200,
      headers: {
        "Content-Type": "text/event-stream; charset=utf-8",
        "Cache-Control": "no-cache",
        Connection: "keep-alive",
        "X-Accel-Buffering": "no",
      },
    });
  });

  app.all("/api/*", () => {
    throw new PublisherError("not_found", "not found");
  });

  // The GUI, mounted last: /api/* above always takes priority.
  app.get("*", async (c) => {
    const asset = STATIC[c.req.path];
    if (!asset) return c.text("not found", 404);
    const content = await readFile(join(d.publicDir, asset.file));
    return c.body(content, 200, {
      "Content-Type": asset.type,
      "Content-Security-Policy": CSP,
      "X-Frame-Options": "DENY",
      "Cache-Control": "no-cache",
    });
  });

  return app;
}
