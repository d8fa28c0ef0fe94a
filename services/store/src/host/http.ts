// The store host's HTTP API: the registered models, each one's manifest, and its files with Range
// and If-Range (only the files a manifest names, only while their size still matches it); uploads
// (ic import) into a hidden area that one commit moves into the store.
import { lstat } from "node:fs/promises";
import { Hono } from "hono";
import type { Logger } from "@ic/log";
import {
  errorBody,
  httpStatusFor,
  ServiceError,
  type ManifestFile,
  type ModelId,
  type StoreManifest,
  type StoreModelList,
} from "@ic/protocol";
import { artifactFile } from "../paths.ts";
import { parseRange } from "../transfer/range.ts";
import { errText } from "../transfer/transfer.ts";
import { filePathParam, modelIdParam } from "../route-params.ts";
import { fileBody } from "./file-body.ts";
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
  const headers = new Headers({
    "content-type": "application/octet-stream",
    "accept-ranges": "bytes",
    etag,
    "x-content-sha256": file.sha256,
  });
  if (range.kind === "unsatisfiable") {
    headers.set("content-range", `bytes */${size}`);
    return new Response(null, { status: 416, headers });
  }
  const [start, end] = range.kind === "partial" ? [range.start, range.end] : [0, size - 1];
  const length = size === 0 ? 0 : end - start + 1;
  headers.set("content-length", String(length));
  if (range.kind === "partial") headers.set("content-range", `bytes ${start}-${end}/${size}`);
  const status = range.kind === "partial" ? 206 : 200;
  host.counters.file_requests++;
  if (range.kind === "partial") host.counters.range_requests++;
  if (req.method === "HEAD" || length === 0) return new Response(null, { status, headers });
  host.counters.open_bodies++;
  const body = fileBody(
    path,
    start,
    end,
    (n) => {
      host.counters.bytes_served += n;
    },
    () => {
      host.counters.open_bodies--;
    },
  );
  return new Response(body, { status, headers });
}
