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
import { PublisherError, scrubSecret, toErrorResponse } from "./errors.ts";
import { inPhase } from "./hub-client.ts";
import { DONE_LINE } from "./jobs.ts";
import type { JobManager, JobSubscription } from "./jobs.ts";
import { localOnly } from "./local-guard.ts";
import { parseModelRef, parseRepoId } from "./model-ref.ts";
import type { JobContext, PublishRequest } from "./publish.ts";
import { register } from "./registration.ts";
import { tokenProblem } from "./token-store.ts";
import type { TokenStore } from "./token-store.ts";

export interface PublisherAppDeps {
  readonly tokens: TokenStore;
  readonly detector: Detector;
  readonly jobs: JobManager;
  readonly catalog: Catalog;
  /** The body of a publish job (`runPublish` wired to the hub and work dir). */
  readonly runPublish: (req: PublishRequest, ctx: JobContext) => Promise<void>;
  readonly publicDir: string;
  readonly log: Logger;
  /** Hub endpoint, so URLs on it parse as model URLs. */
  readonly hubUrl?: string | undefined;
  /** Interval of SSE comment lines that keep idle streams open; 15 s by default. */
  readonly heartbeatMs?: number;
}

const MAX_URL = 2048;
/** Largest request body accepted; every request of the API is a few hundred bytes. */
export const MAX_BODY_BYTES = 64 * 1024;
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

const tooLarge = (): PublisherError =>
  new PublisherError("too_large", `request body is larger than ${MAX_BODY_BYTES} bytes`);

/** The request body, read chunk by chunk and refused as soon as it passes MAX_BODY_BYTES. */
async function readBody(req: Request): Promise<Uint8Array> {
  if (!req.body) return new Uint8Array(0);
  const reader = req.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > MAX_BODY_BYTES) {
        await reader.cancel().catch(() => undefined);
        throw tooLarge();
      }
      chunks.push(value);
    }
  } catch (err) {
    if (err instanceof PublisherError) throw err;
    throw new PublisherError("bad_request", "request body could not be read", { cause: err });
  } finally {
    reader.releaseLock();
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}

async function jsonBody<S extends z.ZodType>(
  c: Context,
  schema: S,
  invalid: string,
): Promise<z.output<S>> {
  const bytes = await readBody(c.req.raw);
  let raw: unknown;
  try {
    raw = JSON.parse(new TextDecoder().decode(bytes));
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
  app.onError((err, c) => toErrorResponse(c, err, log));
  app.notFound((c) => toErrorResponse(c, new PublisherError("not_found", "not found"), log));
  edges(app, d, log);
  apiRoutes(app, d);
  // The GUI, mounted last: /api/* above always takes priority.
  app.get("*", async (c) => {
    const asset = Object.hasOwn(STATIC, c.req.path) ? STATIC[c.req.path] : undefined;
    if (!asset) throw new PublisherError("not_found", "not found");
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

/**
 * The edges every request passes: the hub token scrubbed from JSON answers, security headers and a
 * request log, localhost only, the body bound, no caching of API answers.
 */
function edges(app: Hono, d: PublisherAppDeps, log: Logger): void {
  const secret = (): string | undefined => d.tokens.get();
  // The response edge: no JSON body (an answer or the error envelope) carries the hub token,
  // whatever the request echoed. The job stream's lines are scrubbed where they are written.
  app.use("*", async (c, next) => {
    await next();
    const token = secret();
    if (!token || !c.res.headers.get("content-type")?.startsWith("application/json")) return;
    const text = await c.res.clone().text();
    const clean = scrubSecret(text, token);
    if (clean === text) return;
    const headers = new Headers(c.res.headers);
    headers.delete("content-length");
    c.res = new Response(clean, { status: c.res.status, headers });
  });
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
  // Refuse a declared oversized body before anything reads it; readBody counts the rest.
  app.use("*", async (c, next) => {
    const declared = c.req.header("content-length");
    if (declared !== undefined && Number(declared) > MAX_BODY_BYTES) throw tooLarge();
    await next();
  });
  app.use("/api/*", async (c, next) => {
    await next();
    if (!c.res.headers.get("content-type")?.startsWith("text/event-stream"))
      c.header("Cache-Control", "no-store");
  });
}

/** The API: status and config, detection, publish jobs and their streams, the catalog. */
function apiRoutes(app: Hono, d: PublisherAppDeps): void {
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
    const problem = tokenProblem(token);
    if (problem) throw new PublisherError("bad_request", problem);
    await d.tokens.set(token);
    return c.json({ ok: true });
  });

  app.post("/api/detect", async (c) => {
    const body = await jsonBody(c, UrlBody, "url must be a string");
    const ref = modelRef(body.url);
    const detection = await inPhase(d.detector.hub, `detecting ${ref}`, () =>
      d.detector.detect(ref),
    );
    return c.json(detection.result);
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

  jobRoutes(app, d);
  app.all("/api/*", () => {
    throw new PublisherError("not_found", "not found");
  });
}

/** Publish jobs: starting one, and the stream of its log and outcome. */
function jobRoutes(app: Hono, d: PublisherAppDeps): void {
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
    // One running job per sidecar repo: the same request again (a double click) gets the running
    // job back; another base model for that repo is a conflict until the job finishes.
    const key = sidecarRepo.toLowerCase();
    const label = `${baseModel} -> ${sidecarRepo}`;
    const running = d.jobs.runningWithKey(key);
    if (running) {
      if (running.label.toLowerCase() === label.toLowerCase())
        return c.json({ job_id: running.id });
      throw new PublisherError(
        "conflict",
        `a publish job to ${sidecarRepo} is already running (job ${running.id}); wait for it to finish`,
        { extra: { job_id: running.id } },
      );
    }
    const req: PublishRequest = { baseModel, sidecarRepo };
    const jobId = d.jobs.start(label, (ctx) => d.runPublish(req, ctx), key);
    return c.json({ job_id: jobId });
  });

  app.get("/api/stream/:id", (c) => {
    const id = c.req.param("id");
    if (d.jobs.state(id) === null) throw new PublisherError("not_found", "job not found");
    const body = jobStream(d, id);
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
}

/**
 * A job's log as Server-Sent Events: what it wrote so far, then each line as it comes, a keep-alive
 * comment while it is quiet, and the end line; a client that leaves stops only its own stream.
 */
function jobStream(d: PublisherAppDeps, id: string): ReadableStream<Uint8Array> {
  const enc = new TextEncoder();
  let sub: JobSubscription | null = null;
  let heartbeat: NodeJS.Timeout | undefined;
  let closed = false;
  const cleanup = (): void => {
    closed = true;
    sub?.unsubscribe();
    clearInterval(heartbeat);
  };
  return new ReadableStream<Uint8Array>({
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
}
