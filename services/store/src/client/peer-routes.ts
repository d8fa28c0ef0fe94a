// Where a node serves its staged copies to peers: which pieces of a model it holds
// (GET /store/staged/{org}/{name}/pieces) and byte ranges of them (GET .../files/{path}, Range
// required), from a complete copy or from the verified pieces of one being staged. Peers check every
// piece against the store host's manifest; this side serves only what its own copy verified.
import { open } from "node:fs/promises";
import type { Hono } from "hono";
import { ServiceError } from "@ic/protocol";
import { fileBody } from "../host/file-body.ts";
import { isErrno } from "../paths.ts";
import { filePathParam, modelIdParam } from "../route-params.ts";
import { parseRange } from "../transfer/range.ts";
import type { StagingClient } from "./staging-client.ts";

/** What this node served to peers since it started. */
export interface PeerServeStats {
  bytes_served: number;
  range_requests: number;
}

export function peerCopyRoutes(
  app: Hono,
  staging: () => StagingClient,
  stats: PeerServeStats = { bytes_served: 0, range_requests: 0 },
): void {
  app.get("/store/staged/:org/:name/pieces", async (c) => {
    const id = modelIdParam(c.req.param("org"), c.req.param("name"));
    const pieces = await staging().peerPieces(id);
    if (!pieces) throw new ServiceError("not_found", `no copy of ${id} on this node`);
    return c.json(pieces);
  });

  app.get("/store/staged/:org/:name/files/*", async (c) => {
    const id = modelIdParam(c.req.param("org"), c.req.param("name"));
    const path = filePathParam(c);
    const header = c.req.header("range") ?? "";
    const m = /^bytes=(\d{1,15})-(\d{1,15})$/.exec(header.trim());
    if (!m || Number(m[2]) < Number(m[1]))
      throw new ServiceError(
        "invalid_request",
        "a peer copy is read by ranges: send Range: bytes=<start>-<end>",
      );
    const src = await staging().peerFile(id, path, Number(m[1]), Number(m[2]));
    const size = src.file.bytes;
    const ifRange = c.req.header("if-range");
    if (ifRange !== undefined && ifRange !== `"${src.file.sha256}"`)
      throw new ServiceError("conflict", `this node's copy of ${id}/${path} is another version`);
    const range = parseRange(header, size);
    if (range.kind !== "partial") {
      return new Response(null, { status: 416, headers: { "content-range": `bytes */${size}` } });
    }
    // Opened before answering: a partial renamed into place meanwhile is read under its final name.
    const gone = (e: unknown): never => {
      if (isErrno(e, "ENOENT"))
        throw new ServiceError("conflict", `this node no longer holds ${id}/${path}`);
      throw e;
    };
    const fh = await open(src.path, "r").catch((e: unknown) =>
      isErrno(e, "ENOENT") && src.path !== src.finalPath
        ? open(src.finalPath, "r").catch(gone)
        : gone(e),
    );
    stats.range_requests++;
    const body = fileBody(fh, range.start, range.end, (n) => {
      stats.bytes_served += n;
    });
    return new Response(body, {
      status: 206,
      headers: {
        "content-type": "application/octet-stream",
        "content-length": String(range.end - range.start + 1),
        "content-range": `bytes ${range.start}-${range.end}/${size}`,
        ...(src.file.sha256 ? { etag: `"${src.file.sha256}"` } : {}),
      },
    });
  });
}
