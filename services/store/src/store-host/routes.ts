// The store host's routes. Its own HTTP API (storeHostApp): the registered models, each one's
// manifest, and its files with Range and If-Range (only the files a manifest names, only while their
// size still matches it); uploads (ic import) into a hidden area that one commit moves into the
// store. And the pulls every node takes (pullRoutes) and the store host answers over the bus
// (servePulls). It does not serve staged copies (staging/routes.ts).
import { lstat } from "node:fs/promises";
import { Hono, type Context } from "hono";
import type { Bus } from "@ic/bus";
import { parseJson, validationError } from "@ic/http";
import type { Logger } from "@ic/log";
import {
  errorBody,
  fromWireError,
  httpStatusFor,
  ModelIdSchema,
  PullBodySchema,
  ServiceError,
  toWireError,
  type ClusterView,
  type ManifestFile,
  type ModelId,
  type PullRequest,
  type ReplyOf,
  type StoreManifest,
  type StoreModelList,
} from "@ic/protocol";
import { artifactFile } from "../paths.ts";
import { parseRange } from "../transfer/range.ts";
import { errText } from "../transfer/transfer.ts";
import { filePathParam, modelIdParam } from "../route-params.ts";
import { fileResponse } from "../transfer/routes.ts";
import type { PullManager } from "./pulls.ts";
import type { StoreHost } from "./store-host.ts";
import { Uploads, type UploadsOptions } from "./uploads.ts";

/** What the API reads of the store host, and the counters it adds to. */
export interface StoreHostView {
  readonly log: Logger;
  models(): StoreManifest[];
  manifest(modelId: ModelId): StoreManifest | undefined;
  modelPath(modelId: ModelId): string;
  readonly uploads: UploadsOptions;
  readonly counters: {
    bytes_served: number;
    file_requests: number;
    range_requests: number;
    open_bodies: number;
  };
}

/** Uploads (ic import): files into a hidden area, then one commit moves them into the store. */
function uploadRoutes(app: Hono, host: StoreHostView): void {
  const uploads = new Uploads(host.uploads);
  app.put("/store/uploads/:org/:name/files/*", async (c) => {
    const id = modelIdParam(c.req.param("org"), c.req.param("name"));
    const relPath = filePathParam(c);
    const length = c.req.header("content-length");
    const file = await uploads.receive(
      id,
      relPath,
      c.req.raw.body,
      length === undefined ? Number.NaN : Number(length),
    );
    return c.json({ model_id: id, file }, 201);
  });
  app.post("/store/uploads/:org/:name/commit", async (c) => {
    const id = modelIdParam(c.req.param("org"), c.req.param("name"));
    const out = await uploads.commit(id);
    host.log.info({ modelId: id, files: out.files.length }, "upload committed to the store");
    return c.json({ model_id: id, files: out.files });
  });
  app.delete("/store/uploads/:org/:name", async (c) => {
    const id = modelIdParam(c.req.param("org"), c.req.param("name"));
    if (!(await uploads.abort(id)))
      throw new ServiceError("not_found", `no upload of ${id} in progress`);
    return c.json({ model_id: id, aborted: true });
  });
}

/** The store host's HTTP API: its models, their manifests and files (with Range), uploads. */
export function storeHostApp(host: StoreHostView): Hono {
  const app = new Hono();
  app.onError((err, c) => {
    const e =
      err instanceof ServiceError
        ? err
        : new ServiceError("internal", err instanceof Error ? err.message : String(err));
    if (e.code === "internal") host.log.error({ err }, "store host request failed");
    return c.json(errorBody(e), httpStatusFor(e.code));
  });
  app.notFound((c) =>
    c.json(errorBody(new ServiceError("not_found", `no route ${c.req.method} ${c.req.path}`)), 404),
  );

  app.get("/store/models", (c) => {
    const body: StoreModelList = {
      models: host.models().map((m) => ({
        model_id: m.model_id,
        total_bytes: m.total_bytes,
        files: m.files.length,
      })),
    };
    return c.json(body);
  });

  app.get("/store/models/:org/:name/manifest", (c) => {
    const manifest = requireManifest(host, c.req.param("org"), c.req.param("name"));
    return c.json(manifest);
  });

  uploadRoutes(app, host);
  app.on(["GET", "HEAD"], "/store/models/:org/:name/files/*", async (c) => {
    const manifest = requireManifest(host, c.req.param("org"), c.req.param("name"));
    // Only a path the manifest names is served.
    const relPath = filePathParam(c);
    const file = manifest.files.find((f) => f.path === relPath);
    if (!file) throw new ServiceError("not_found", `${manifest.model_id} has no file ${relPath}`);
    return serveFile(host, c.req.raw, manifest.model_id, file);
  });
  return app;
}

function requireManifest(host: StoreHostView, org: string, name: string): StoreManifest {
  const id = modelIdParam(org, name);
  const manifest = host.manifest(id);
  if (!manifest) throw new ServiceError("not_found", `${id} is not registered in the store`);
  return manifest;
}

async function serveFile(
  host: StoreHostView,
  req: Request,
  modelId: ModelId,
  file: ManifestFile,
): Promise<Response> {
  const path = artifactFile(host.modelPath(modelId), file.path);
  let size: number;
  try {
    const s = await lstat(path);
    if (!s.isFile()) throw new Error("not a regular file");
    size = s.size;
  } catch (e) {
    throw new ServiceError(
      "conflict",
      `${modelId}/${file.path} is missing from the store: ${errText(e)}`,
    );
  }
  if (size !== file.bytes) {
    throw new ServiceError(
      "conflict",
      `${modelId}/${file.path} has ${size} bytes, its manifest says ${file.bytes}; register the model again`,
    );
  }
  const etag = `"${file.sha256}"`;
  const ifRange = req.headers.get("if-range");
  const rangeHeader =
    ifRange !== null && ifRange !== etag ? undefined : (req.headers.get("range") ?? undefined);
  const range = parseRange(rangeHeader, size);
  if (range.kind !== "unsatisfiable") host.counters.file_requests++;
  if (range.kind === "partial") host.counters.range_requests++;
  return fileResponse({
    source: path,
    size,
    range,
    headers: {
      "content-type": "application/octet-stream",
      "accept-ranges": "bytes",
      etag,
      "x-content-sha256": file.sha256,
    },
    head: req.method === "HEAD",
    onBody: () => host.counters.open_bodies++,
    counters: {
      onBytes: (n) => (host.counters.bytes_served += n),
      onEnd: () => host.counters.open_bodies--,
    },
  });
}

/** The store host answers pull requests from every node (its own included). */
export function servePulls(
  bus: Pick<Bus, "respond">,
  pulls: PullManager,
  store: Pick<StoreHost, "remove" | "checkQuant">,
  self: { readonly name: string; readonly apiUrl: string },
): () => void {
  const answer = async (req: PullRequest): Promise<ReplyOf<"storePulls">> => {
    switch (req.op) {
      case "remove": {
        const live = pulls
          .list()
          .find(
            (p) => p.model_id === req.model_id && (p.state === "queued" || p.state === "running"),
          );
        if (live)
          throw new ServiceError(
            "conflict",
            `a pull of ${req.model_id} is ${live.state}; cancel it first`,
          );
        if (!req.check_only) await store.remove(req.model_id);
        return { ok: true, pulls: [] };
      }
      case "start": {
        // An unknown quantization is a 400 naming the available ones, before anything is queued
        // (unless this very pull already runs: then the answer is the live pull or a conflict).
        const live = pulls.list().find((p) => p.model_id === req.model_id);
        if (req.quant !== undefined && !(live?.state === "queued" || live?.state === "running"))
          await store.checkQuant(req.model_id, req.quant, req.revision);
        const { pull, created } = pulls.start(req.model_id, req.revision, req.quant);
        return { ok: true, pulls: [pull], created };
      }
      case "cancel": {
        const p = pulls.cancel(req.model_id);
        if (!p) throw new ServiceError("not_found", `no pull of ${req.model_id} on the store host`);
        return { ok: true, pulls: [p.pull], dismissed: p.dismissed };
      }
      case "list":
        return { ok: true, pulls: pulls.list() };
      case "locate":
        return { ok: true, pulls: [], store_host: { name: self.name, api_url: self.apiUrl } };
    }
  };
  return bus.respond("storePulls", async (req) => {
    try {
      return await answer(req);
    } catch (e) {
      return { ok: false, error: toWireError(e) };
    }
  });
}

/**
 * POST/GET/DELETE /store/pulls and DELETE /store/models/{org}/{name} on every node; the store host
 * does the work.
 */
export function pullRoutes(
  app: Hono,
  o: { readonly bus: Pick<Bus, "request">; readonly cluster: Pick<ClusterView, "command"> },
): void {
  const ask = async (req: PullRequest): Promise<Extract<ReplyOf<"storePulls">, { ok: true }>> => {
    let reply: ReplyOf<"storePulls">;
    try {
      reply = await o.bus.request("storePulls", req, { timeoutMs: 10_000 });
    } catch (e) {
      throw new ServiceError(
        "unavailable",
        `no store host answered (a cluster pulls models into the store_path of its store node): ${
          e instanceof Error ? e.message : String(e)
        }`,
      );
    }
    if (!reply.ok) throw fromWireError(reply.error);
    return reply;
  };
  const idOf = (org: string, name: string) => {
    const id = ModelIdSchema.safeParse(`${org}/${name}`);
    if (!id.success) throw validationError(id.error, "model_id");
    return id.data;
  };
  /** A model id in a path that is not two segments (`a/b/c`) is bad input, not an unknown route. */
  const badPathId = (c: Context): never => {
    const rest = c.req.path.replace(/^\/store\/(pulls|models)\/?/, "");
    throw new ServiceError(
      "invalid_request",
      `model_id: must be <org>/<name> (two path segments), got ${JSON.stringify(rest)}`,
      { details: { issues: [{ path: "model_id", message: "must be <org>/<name>" }] } },
    );
  };
  app.post("/store/pulls", async (c) => {
    const body = await parseJson(c, PullBodySchema);
    const reply = await ask({
      op: "start",
      model_id: body.model_id,
      ...(body.revision ? { revision: body.revision } : {}),
      ...(body.quant ? { quant: body.quant } : {}),
    });
    return c.json({ pull: reply.pulls[0] }, reply.created === false ? 200 : 202);
  });
  app.get("/store/pulls", async (c) => c.json({ pulls: (await ask({ op: "list" })).pulls }));
  app.get("/store/host", async (c) => {
    const where = (await ask({ op: "locate" })).store_host;
    if (!where) throw new ServiceError("unavailable", "the store host did not say where it is");
    return c.json(where);
  });
  app.delete("/store/pulls/:org/:name", async (c) => {
    const id = idOf(c.req.param("org"), c.req.param("name"));
    const reply = await ask({ op: "cancel", model_id: id });
    return c.json({ pull: reply.pulls[0], dismissed: reply.dismissed ?? false });
  });
  app.delete("/store/pulls/*", badPathId);
  // A pull of it in progress refuses before anything changes; then out of the registry (the master
  // refuses while an instance, a deployment or a model it drafts for uses it), then off the disk.
  app.delete("/store/models/:org/:name", async (c) => {
    const id = idOf(c.req.param("org"), c.req.param("name"));
    await ask({ op: "remove", model_id: id, check_only: true });
    await o.cluster.command({ type: "DeregisterModel", model_id: id });
    await ask({ op: "remove", model_id: id });
    return c.json({ ok: true, model_id: id });
  });
  app.delete("/store/models/*", badPathId);
}
