// The hub emulator's LFS routes: the batch API (basic uploads, and multipart above the chunk size)
// and the upload endpoints it hands out, like S3 presigned URLs; each upload is checked against its
// sha256 and size before the object counts as stored.
import { createHash, randomBytes } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import type { Context, Hono } from "hono";
import { z } from "zod";
import { errorJson } from "./emulator-state.ts";
import type { EmulatorState } from "./emulator-state.ts";

const LfsBatchSchema = z.object({
  operation: z.enum(["upload", "download"]),
  transfers: z.array(z.string()).optional(),
  objects: z.array(
    z.object({ oid: z.string().regex(/^[0-9a-f]{64}$/), size: z.number().int().nonnegative() }),
  ),
});
const CompleteMultipartSchema = z.object({
  oid: z.string(),
  parts: z.array(z.object({ partNumber: z.number().int().positive(), etag: z.string() })),
});

export function lfsRoutes(app: Hono, s: EmulatorState): void {
  app.post("/:owner/:repo{.+\\.git}/info/lfs/objects/batch", (c) => lfsBatch(s, c));
  app.put("/__lfs/upload/:oid", (c) => basicUpload(s, c, c.req.param("oid")));
  app.put("/__lfs/multipart/:oid/:part{[0-9]+}", (c) =>
    multipartPart(s, c, c.req.param("oid"), Number(c.req.param("part"))),
  );
  app.post("/__lfs/multipart/:oid/complete", (c) => completeMultipart(s, c, c.req.param("oid")));
}

async function lfsBatch(s: EmulatorState, c: Context): Promise<Response> {
  const id = `${c.req.param("owner")}/${(c.req.param("repo") ?? "").replace(/\.git$/, "")}`;
  const repo = s.writableRepo(c, id);
  if (repo instanceof Response) return repo;
  const body = LfsBatchSchema.safeParse(await c.req.json().catch(() => null));
  if (!body.success) return errorJson(c, 422, "invalid LFS batch request");
  if (body.data.operation !== "upload")
    return errorJson(c, 422, "the emulator only accepts LFS uploads");
  let multipart = false;
  const objects = await Promise.all(
    body.data.objects.map(async ({ oid, size }) => {
      if (await s.store.hasObject(oid, size)) return { oid, size, authenticated: true };
      s.pendingUploads.set(oid, size);
      if (size > s.chunkSize) {
        multipart = true;
        return multipartAction(s, oid, size);
      }
      return {
        oid,
        size,
        authenticated: true,
        actions: { upload: { href: `${s.baseUrl}/__lfs/upload/${oid}` } },
      };
    }),
  );
  return c.json({ transfer: multipart ? "multipart" : "basic", objects }, 200, {
    "Content-Type": "application/vnd.git-lfs+json",
    "X-Request-Id": randomBytes(8).toString("hex"),
  });
}

/** A batch answer's object for a multipart upload: one URL per chunk, and the completion URL. */
function multipartAction(s: EmulatorState, oid: string, size: number) {
  const header: Record<string, string> = { chunk_size: String(s.chunkSize) };
  const parts = Math.ceil(size / s.chunkSize);
  for (let i = 1; i <= parts; i++)
    header[String(i).padStart(5, "0")] = `${s.baseUrl}/__lfs/multipart/${oid}/${i}`;
  return {
    oid,
    size,
    authenticated: true,
    actions: { upload: { href: `${s.baseUrl}/__lfs/multipart/${oid}/complete`, header } },
  };
}

function bodyStream(c: Context): Readable {
  const body = c.req.raw.body;
  return body
    ? Readable.fromWeb(body as unknown as NodeWebReadableStream<Uint8Array>)
    : Readable.from([]);
}

async function basicUpload(s: EmulatorState, c: Context, oid: string): Promise<Response> {
  const expected = s.pendingUploads.get(oid);
  if (expected === undefined) return errorJson(c, 404, "no pending upload for this oid");
  // Like S3 presigned PUTs: a declared length is required (no chunked uploads).
  if (c.req.header("content-length") === undefined)
    return errorJson(c, 411, "Content-Length required");
  const put = await s.store.putStream(bodyStream(c));
  if (put.sha256 !== oid || put.size !== expected)
    return errorJson(c, 400, `upload does not match oid ${oid} / size ${expected}`);
  s.pendingUploads.delete(oid);
  return c.body(null, 200, { ETag: `"${oid}"` });
}

/** Stores one part of a multipart upload (`part` counts from 1); the ETag is its md5. */
async function multipartPart(
  s: EmulatorState,
  c: Context,
  oid: string,
  part: number,
): Promise<Response> {
  if (!s.pendingUploads.has(oid)) return errorJson(c, 404, "no pending upload for this oid");
  if (c.req.header("content-length") === undefined)
    return errorJson(c, 411, "Content-Length required");
  const partPath = join(s.root, "tmp", `${oid}.part${part}`);
  const md5 = createHash("md5");
  await pipeline(
    bodyStream(c),
    async function* (src: AsyncIterable<Buffer>) {
      for await (const chunk of src) {
        md5.update(chunk);
        yield chunk;
      }
    },
    createWriteStream(partPath),
  );
  return c.body(null, 200, { ETag: `"${md5.digest("hex")}"` });
}

async function completeMultipart(s: EmulatorState, c: Context, oid: string): Promise<Response> {
  const expected = s.pendingUploads.get(oid);
  if (expected === undefined) return errorJson(c, 404, "no pending upload for this oid");
  const body = CompleteMultipartSchema.safeParse(await c.req.json().catch(() => null));
  if (!body.success || body.data.oid !== oid) return errorJson(c, 400, "invalid completion body");
  const parts = [...body.data.parts].sort((a, b) => a.partNumber - b.partNumber);
  if (parts.length !== Math.ceil(expected / s.chunkSize))
    return errorJson(c, 400, "wrong number of parts");
  const partPaths = parts.map((p) => join(s.root, "tmp", `${oid}.part${p.partNumber}`));
  const put = await s.store.putStream(
    (async function* () {
      for (const p of partPaths) yield* createReadStream(p) as AsyncIterable<Buffer>;
    })(),
  );
  await Promise.all(partPaths.map((p) => rm(p, { force: true })));
  if (put.sha256 !== oid || put.size !== expected)
    return errorJson(c, 400, `upload does not match oid ${oid} / size ${expected}`);
  s.pendingUploads.delete(oid);
  return c.json({ ok: true });
}
