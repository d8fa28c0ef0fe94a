// A local model-hub emulator: the HTTP calls @huggingface/hub v2 makes, served from a temp dir.
// Model info, tree, resolve/raw with Range and HEAD, whoami, repo creation, preupload, LFS batch
// (basic and multipart) and the ndjson commit; uploads are verified against their sha256.
import { createHash, randomBytes } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as NodeWebReadableStream } from "node:stream/web";
import { serve } from "@hono/node-server";
import type { ServerType } from "@hono/node-server";
import { Hono } from "hono";
import type { Context } from "hono";
import { z } from "zod";
import type { CardData } from "./front-matter.ts";
import { isLfsPath, lfsPointer, newCommitOid, RepoStore } from "./repo-store.ts";
import type { HubFileSource, StoredFile, StoredRepo } from "./repo-store.ts";

export interface HubEmulatorOptions {
  /** When set, writes need `Authorization: Bearer <token>` and any other token is refused (401). */
  readonly token?: string;
  /** The user whoami reports and the default namespace of created repos. */
  readonly user?: string;
  /** LFS uploads larger than this use the multipart protocol; 8 MiB by default. */
  readonly multipartChunkSize?: number;
}

export interface AddRepoOptions {
  readonly private?: boolean;
  /** Card data served by model info; parsed from README.md front matter when absent. */
  readonly cardData?: CardData;
}

export interface HubRequestRecord {
  readonly method: string;
  /** Path and query as requested. */
  readonly path: string;
  /** The Range request header, or null. */
  readonly range: string | null;
  readonly status: number;
  /** Whether the request carried an Authorization header. */
  readonly authorized: boolean;
}

export interface HubHold {
  /** Lets every held request (and later matching ones) through. */
  release(): void;
  /** How many requests are waiting on this hold now. */
  readonly waiting: number;
}

export interface HubEmulator {
  readonly url: string;
  /** Creates (or replaces) a model repo with the given files; one commit. */
  addRepo(
    id: string,
    files: Readonly<Record<string, HubFileSource>>,
    opts?: AddRepoOptions,
  ): Promise<void>;
  /** The current content of a file, or null when the repo or file does not exist. */
  readFile(id: string, path: string): Promise<Buffer | null>;
  /** Size, sha256 and LFS flag of a file, or null. */
  fileInfo(id: string, path: string): StoredFile | null;
  /** Where the file's bytes lie on disk (read-only), for streaming comparisons of large files. */
  localPath(id: string, path: string): string | null;
  /** Paths of the files of a repo (sorted), or null when it does not exist. */
  listRepoFiles(id: string): string[] | null;
  /** Commit titles of a repo, oldest first. */
  commitTitles(id: string): string[] | null;
  /** Every request served so far, in order. */
  readonly requests: readonly HubRequestRecord[];
  /** Holds matching requests until released: lets tests keep transfers in flight. */
  hold(match: (req: { method: string; path: string }) => boolean): HubHold;
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

type Auth = "none" | "ok" | "bad";

const DEFAULT_CHUNK = 8 * 1024 * 1024;

const LfsBatchSchema = z.object({
  operation: z.enum(["upload", "download"]),
  transfers: z.array(z.string()).optional(),
  objects: z.array(
    z.object({ oid: z.string().regex(/^[0-9a-f]{64}$/), size: z.number().int().nonnegative() }),
  ),
});
const PreuploadSchema = z.object({
  files: z.array(z.object({ path: z.string().min(1), size: z.number().int().nonnegative() })),
});
const CreateRepoSchema = z.object({
  name: z.string().min(1),
  organization: z.string().min(1).optional(),
  type: z.enum(["model", "dataset", "space"]).optional(),
  private: z.boolean().optional(),
  visibility: z.enum(["public", "private", "protected"]).optional(),
});
const CompleteMultipartSchema = z.object({
  oid: z.string(),
  parts: z.array(z.object({ partNumber: z.number().int().positive(), etag: z.string() })),
});
const CommitLineSchema = z.discriminatedUnion("key", [
  z.object({
    key: z.literal("header"),
    value: z.object({
      summary: z.string(),
      description: z.string().optional(),
      parentCommit: z.string().optional(),
    }),
  }),
  z.object({
    key: z.literal("file"),
    value: z.object({
      path: z.string().min(1),
      content: z.string(),
      encoding: z.enum(["base64", "utf-8"]).optional(),
    }),
  }),
  z.object({
    key: z.literal("lfsFile"),
    value: z.object({
      path: z.string().min(1),
      oid: z.string(),
      size: z.number().int().nonnegative(),
      algo: z.string().optional(),
    }),
  }),
  z.object({ key: z.literal("deletedFile"), value: z.object({ path: z.string().min(1) }) }),
]);

const REPO_SEGMENT = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

function parseRange(
  header: string | null | undefined,
  size: number,
): { start: number; end: number } | "invalid" | null {
  if (!header) return null;
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!m) return "invalid";
  const [, a = "", b = ""] = m;
  let start: number;
  let end: number;
  if (a === "" && b === "") return "invalid";
  if (a === "") {
    const n = Number(b);
    if (n === 0) return "invalid";
    start = Math.max(0, size - n);
    end = size - 1;
  } else {
    start = Number(a);
    end = b === "" ? size - 1 : Math.min(Number(b), size - 1);
  }
  if (start >= size || end < start) return "invalid";
  return { start, end };
}

function errorJson(
  c: Context,
  status: 400 | 401 | 403 | 404 | 409 | 411 | 412 | 416 | 422,
  message: string,
  code?: string,
): Response {
  return c.json({ error: message }, status, code ? { "X-Error-Code": code } : {});
}

export async function startHubEmulator(options: HubEmulatorOptions = {}): Promise<HubEmulator> {
  const root = await mkdtemp(join(tmpdir(), "hub-emulator-"));
  const store = new RepoStore(root);
  await store.init();
  const user = options.user ?? "emulator-user";
  const chunkSize = options.multipartChunkSize ?? DEFAULT_CHUNK;
  const requests: HubRequestRecord[] = [];
  const pendingUploads = new Map<string, number>();
  const holds = new Set<{
    match: (r: { method: string; path: string }) => boolean;
    gate: Promise<void>;
    open: () => void;
    waiting: number;
  }>();
  let baseUrl = "";

  const authOf = (c: Context): Auth => {
    const h = c.req.header("authorization");
    if (!h) return "none";
    const m = /^Bearer\s+(.+)$/i.exec(h);
    if (!m) return "bad";
    if (options.token === undefined) return "ok";
    return m[1] === options.token ? "ok" : "bad";
  };

  /** Resolves the repo for a read; returns an error response when it is missing or hidden. */
  const readableRepo = (c: Context, id: string): StoredRepo | Response => {
    const auth = authOf(c);
    if (auth === "bad") return errorJson(c, 401, "Invalid credentials in Authorization header");
    const repo = store.get(id);
    if (!repo || (repo.private && auth !== "ok")) {
      return errorJson(c, repo ? 401 : 404, "Repository not found", "RepoNotFound");
    }
    return repo;
  };

  const writableRepo = (c: Context, id: string): StoredRepo | Response => {
    const auth = authOf(c);
    if (auth !== "ok") return errorJson(c, 401, "Invalid credentials in Authorization header");
    const repo = store.get(id);
    if (!repo) return errorJson(c, 404, "Repository not found", "RepoNotFound");
    return repo;
  };

  const revisionOk = (repo: StoredRepo, rev: string): boolean => {
    const r = decodeURIComponent(rev);
    return (
      r === "main" || r === "HEAD" || r === repo.commit || repo.commits.some((x) => x.oid === r)
    );
  };

  const modelInfoJson = async (repo: StoredRepo): Promise<Record<string, unknown>> => {
    const cardData = await store.cardData(repo);
    const tags = Array.isArray(cardData?.["tags"]) ? cardData["tags"] : [];
    return {
      _id: createHash("sha1").update(repo.id).digest("hex").slice(0, 24),
      id: repo.id,
      modelId: repo.id,
      author: repo.id.split("/")[0],
      sha: repo.commit,
      private: repo.private,
      gated: false,
      disabled: false,
      downloads: 0,
      likes: 0,
      tags,
      library_name:
        typeof cardData?.["library_name"] === "string" ? cardData["library_name"] : undefined,
      pipeline_tag:
        typeof cardData?.["pipeline_tag"] === "string" ? cardData["pipeline_tag"] : undefined,
      createdAt: repo.createdAt.toISOString(),
      lastModified: repo.lastModified.toISOString(),
      cardData: cardData ?? undefined,
      config: (await store.config(repo)) ?? undefined,
      siblings: [...repo.files.keys()].sort().map((rfilename) => ({ rfilename })),
    };
  };

  const app = new Hono();

  app.use("*", async (c, next) => {
    const url = new URL(c.req.url);
    const path = url.pathname + url.search;
    for (const h of holds) {
      if (h.match({ method: c.req.method, path })) {
        h.waiting++;
        try {
          await h.gate;
        } finally {
          h.waiting--;
        }
      }
    }
    await next();
    requests.push({
      method: c.req.method,
      path,
      range: c.req.header("range") ?? null,
      status: c.res.status,
      authorized: c.req.header("authorization") !== undefined,
    });
  });

  app.get("/api/whoami-v2", (c) => {
    if (authOf(c) !== "ok") return errorJson(c, 401, "Invalid credentials in Authorization header");
    return c.json({
      type: "user",
      id: createHash("sha1").update(user).digest("hex").slice(0, 24),
      name: user,
      fullname: user,
      email: `${user}@example.invalid`,
      emailVerified: true,
      isPro: false,
      canPay: false,
      avatarUrl: "",
      periodEnd: null,
      billingMode: "prepaid",
      orgs: [],
      auth: {
        type: "access_token",
        accessToken: {
          displayName: "emulator",
          role: "write",
          createdAt: new Date(0).toISOString(),
        },
      },
    });
  });

  const infoHandler = async (c: Context): Promise<Response> => {
    const id = `${c.req.param("owner")}/${c.req.param("name")}`;
    const repo = readableRepo(c, id);
    if (repo instanceof Response) return repo;
    const rev = c.req.param("rev");
    if (rev !== undefined && !revisionOk(repo, rev))
      return errorJson(c, 404, "Revision not found", "RevisionNotFound");
    return c.json(await modelInfoJson(repo));
  };
  app.get("/api/models/:owner/:name", infoHandler);
  app.get("/api/models/:owner/:name/revision/:rev", infoHandler);

  const treeHandler = (c: Context): Response => {
    const id = `${c.req.param("owner")}/${c.req.param("name")}`;
    const repo = readableRepo(c, id);
    if (repo instanceof Response) return repo;
    if (!revisionOk(repo, c.req.param("rev") ?? "main"))
      return errorJson(c, 404, "Revision not found", "RevisionNotFound");
    const prefix = (c.req.param("path") ?? "").replace(/\/+$/, "");
    const recursive = c.req.query("recursive") === "true";
    const expand = c.req.query("expand") === "true";
    const under = prefix === "" ? "" : `${prefix}/`;
    const files = [...repo.files.values()]
      .filter((f) => f.path.startsWith(under))
      .sort((a, b) => (a.path < b.path ? -1 : 1));
    if (prefix !== "" && files.length === 0)
      return errorJson(c, 404, "Entry not found", "EntryNotFound");
    const last = repo.commits[repo.commits.length - 1];
    const lastCommit =
      expand && last
        ? { id: last.oid, title: last.title, date: last.date.toISOString() }
        : undefined;
    const entries: Record<string, unknown>[] = [];
    const dirs = new Set<string>();
    for (const f of files) {
      const rest = f.path.slice(under.length);
      const parts = rest.split("/");
      for (let i = 1; i < parts.length; i++) {
        const dir = under + parts.slice(0, i).join("/");
        if ((recursive || i === 1) && !dirs.has(dir)) {
          dirs.add(dir);
          entries.push({
            type: "directory",
            oid: createHash("sha1").update(dir).digest("hex"),
            size: 0,
            path: dir,
            lastCommit,
          });
        }
      }
      if (!recursive && parts.length > 1) continue;
      entries.push({
        type: "file",
        oid: f.gitOid,
        size: f.size,
        path: f.path,
        ...(f.lfs
          ? {
              lfs: {
                oid: f.sha256,
                size: f.size,
                pointerSize: lfsPointer(f.sha256, f.size).length,
              },
            }
          : {}),
        lastCommit,
      });
    }
    return c.json(entries);
  };
  app.get("/api/models/:owner/:name/tree/:rev", treeHandler);
  app.get("/api/models/:owner/:name/tree/:rev/:path{.+}", treeHandler);

  /** The repo a create or delete request names, or the error answer (auth, body, name). */
  const repoRequest = async (c: Context) => {
    if (authOf(c) !== "ok")
      return { answer: errorJson(c, 401, "Invalid credentials in Authorization header") };
    const body = CreateRepoSchema.safeParse(await c.req.json().catch(() => null));
    if (!body.success)
      return {
        answer: errorJson(c, 400, `invalid body: ${body.error.issues[0]?.message ?? "?"}`),
      };
    if ((body.data.type ?? "model") !== "model")
      return { answer: errorJson(c, 400, "the emulator only hosts model repos") };
    const owner = body.data.organization ?? user;
    if (!REPO_SEGMENT.test(owner) || !REPO_SEGMENT.test(body.data.name))
      return { answer: errorJson(c, 400, "invalid repo name") };
    return { id: `${owner}/${body.data.name}`, body: body.data };
  };

  app.post("/api/repos/create", async (c) => {
    const r = await repoRequest(c);
    if (r.answer) return r.answer;
    const { id, body } = r;
    if (store.get(id))
      return c.json({ error: "You already created this model repo", url: `${baseUrl}/${id}` }, 409);
    store.createRepo(id, body.private ?? body.visibility === "private");
    return c.json({ url: `${baseUrl}/${id}`, name: id, id });
  });

  // The hub's repo deletion (what @huggingface/hub's deleteRepo sends): owner-authenticated.
  app.delete("/api/repos/delete", async (c) => {
    const r = await repoRequest(c);
    if (r.answer) return r.answer;
    if (!store.deleteRepo(r.id)) return errorJson(c, 404, `Repository ${r.id} not found`);
    return c.json({});
  });

  app.post("/api/models/:owner/:name/preupload/:rev", async (c) => {
    const repo = writableRepo(c, `${c.req.param("owner")}/${c.req.param("name")}`);
    if (repo instanceof Response) return repo;
    const body = PreuploadSchema.safeParse(await c.req.json().catch(() => null));
    if (!body.success) return errorJson(c, 400, "invalid preupload body");
    return c.json({
      files: body.data.files.map((f) => ({
        path: f.path,
        uploadMode: isLfsPath(f.path, f.size) ? "lfs" : "regular",
        shouldIgnore: false,
      })),
    });
  });

  app.post("/:owner/:repo{.+\\.git}/info/lfs/objects/batch", async (c) => {
    const id = `${c.req.param("owner")}/${(c.req.param("repo") ?? "").replace(/\.git$/, "")}`;
    const repo = writableRepo(c, id);
    if (repo instanceof Response) return repo;
    const body = LfsBatchSchema.safeParse(await c.req.json().catch(() => null));
    if (!body.success) return errorJson(c, 422, "invalid LFS batch request");
    if (body.data.operation !== "upload")
      return errorJson(c, 422, "the emulator only accepts LFS uploads");
    let multipart = false;
    const objects = await Promise.all(
      body.data.objects.map(async ({ oid, size }) => {
        if (await store.hasObject(oid, size)) return { oid, size, authenticated: true };
        pendingUploads.set(oid, size);
        if (size > chunkSize) {
          multipart = true;
          const header: Record<string, string> = { chunk_size: String(chunkSize) };
          const parts = Math.ceil(size / chunkSize);
          for (let i = 1; i <= parts; i++)
            header[String(i).padStart(5, "0")] = `${baseUrl}/__lfs/multipart/${oid}/${i}`;
          return {
            oid,
            size,
            authenticated: true,
            actions: { upload: { href: `${baseUrl}/__lfs/multipart/${oid}/complete`, header } },
          };
        }
        return {
          oid,
          size,
          authenticated: true,
          actions: { upload: { href: `${baseUrl}/__lfs/upload/${oid}` } },
        };
      }),
    );
    return c.json({ transfer: multipart ? "multipart" : "basic", objects }, 200, {
      "Content-Type": "application/vnd.git-lfs+json",
      "X-Request-Id": randomBytes(8).toString("hex"),
    });
  });

  const bodyStream = (c: Context): Readable => {
    const body = c.req.raw.body;
    return body
      ? Readable.fromWeb(body as unknown as NodeWebReadableStream<Uint8Array>)
      : Readable.from([]);
  };

  app.put("/__lfs/upload/:oid", async (c) => {
    const oid = c.req.param("oid");
    const expected = pendingUploads.get(oid);
    if (expected === undefined) return errorJson(c, 404, "no pending upload for this oid");
    // Like S3 presigned PUTs: a declared length is required (no chunked uploads).
    if (c.req.header("content-length") === undefined)
      return errorJson(c, 411, "Content-Length required");
    const put = await store.putStream(bodyStream(c));
    if (put.sha256 !== oid || put.size !== expected)
      return errorJson(c, 400, `upload does not match oid ${oid} / size ${expected}`);
    pendingUploads.delete(oid);
    return c.body(null, 200, { ETag: `"${oid}"` });
  });

  app.put("/__lfs/multipart/:oid/:part{[0-9]+}", async (c) => {
    const oid = c.req.param("oid");
    if (!pendingUploads.has(oid)) return errorJson(c, 404, "no pending upload for this oid");
    if (c.req.header("content-length") === undefined)
      return errorJson(c, 411, "Content-Length required");
    const partPath = join(root, "tmp", `${oid}.part${Number(c.req.param("part"))}`);
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
  });

  app.post("/__lfs/multipart/:oid/complete", async (c) => {
    const oid = c.req.param("oid");
    const expected = pendingUploads.get(oid);
    if (expected === undefined) return errorJson(c, 404, "no pending upload for this oid");
    const body = CompleteMultipartSchema.safeParse(await c.req.json().catch(() => null));
    if (!body.success || body.data.oid !== oid) return errorJson(c, 400, "invalid completion body");
    const parts = [...body.data.parts].sort((a, b) => a.partNumber - b.partNumber);
    if (parts.length !== Math.ceil(expected / chunkSize))
      return errorJson(c, 400, "wrong number of parts");
    const partPaths = parts.map((p) => join(root, "tmp", `${oid}.part${p.partNumber}`));
    const put = await store.putStream(
      (async function* () {
        for (const p of partPaths) yield* createReadStream(p) as AsyncIterable<Buffer>;
      })(),
    );
    await Promise.all(partPaths.map((p) => rm(p, { force: true })));
    if (put.sha256 !== oid || put.size !== expected)
      return errorJson(c, 400, `upload does not match oid ${oid} / size ${expected}`);
    pendingUploads.delete(oid);
    return c.json({ ok: true });
  });

  app.post("/api/models/:owner/:name/commit/:rev", async (c) => {
    const repo = writableRepo(c, `${c.req.param("owner")}/${c.req.param("name")}`);
    if (repo instanceof Response) return repo;
    const rev = decodeURIComponent(c.req.param("rev"));
    if (rev !== "main")
      return errorJson(c, 404, "the emulator only has a main branch", "RevisionNotFound");
    const lines = (await c.req.text()).split("\n").filter((l) => l.trim() !== "");
    const parsed = [];
    for (const line of lines) {
      let raw: unknown;
      try {
        raw = JSON.parse(line);
      } catch {
        return errorJson(c, 400, "commit body must be ndjson");
      }
      const r = CommitLineSchema.safeParse(raw);
      if (!r.success) return errorJson(c, 400, `invalid commit line: ${line.slice(0, 200)}`);
      parsed.push(r.data);
    }
    const header = parsed[0];
    if (!header || header.key !== "header")
      return errorJson(c, 400, "commit must start with a header line");
    if (header.value.parentCommit && header.value.parentCommit !== repo.commit) {
      return errorJson(c, 412, "parent commit is not the head of the branch");
    }
    const next = new Map(repo.files);
    for (const op of parsed.slice(1)) {
      switch (op.key) {
        case "header":
          return errorJson(c, 400, "only one header line is allowed");
        case "file": {
          const bytes =
            op.value.encoding === "base64"
              ? Buffer.from(op.value.content, "base64")
              : Buffer.from(op.value.content);
          const put = await store.putSource(bytes);
          next.set(
            op.value.path,
            store.fileRecord(op.value.path, put.sha256, put.size, put.gitContentSha1),
          );
          break;
        }
        case "lfsFile": {
          if (!(await store.hasObject(op.value.oid, op.value.size))) {
            return errorJson(
              c,
              422,
              `LFS object ${op.value.oid} for ${op.value.path} was never uploaded`,
            );
          }
          next.set(
            op.value.path,
            store.fileRecord(op.value.path, op.value.oid, op.value.size, "", true),
          );
          break;
        }
        case "deletedFile":
          if (!next.delete(op.value.path))
            return errorJson(c, 404, `${op.value.path} does not exist`, "EntryNotFound");
          break;
      }
    }
    repo.files = next;
    repo.commit = newCommitOid();
    repo.lastModified = new Date();
    repo.commits.push({ oid: repo.commit, title: header.value.summary, date: repo.lastModified });
    return c.json({
      success: true,
      commitOid: repo.commit,
      commitUrl: `${baseUrl}/${repo.id}/commit/${repo.commit}`,
      hookOutput: "",
      pullRequestUrl: undefined,
    });
  });

  const fileHandler =
    (kind: "resolve" | "raw") =>
    async (c: Context): Promise<Response> => {
      const id = `${c.req.param("owner")}/${c.req.param("name")}`;
      const repo = readableRepo(c, id);
      if (repo instanceof Response) return repo;
      if (!revisionOk(repo, c.req.param("rev") ?? "main"))
        return errorJson(c, 404, "Revision not found", "RevisionNotFound");
      const path = c.req.param("path") ?? "";
      const file = repo.files.get(path);
      if (!file) return errorJson(c, 404, "Entry not found", "EntryNotFound");
      const pointer =
        kind === "raw" && file.lfs ? Buffer.from(lfsPointer(file.sha256, file.size)) : null;
      const size = pointer ? pointer.length : file.size;
      const headers: Record<string, string> = {
        "Accept-Ranges": "bytes",
        "Content-Type": path.endsWith(".json")
          ? "application/json"
          : path.endsWith(".md")
            ? "text/markdown"
            : "application/octet-stream",
        ETag: `"${pointer ? file.gitOid : file.lfs ? file.sha256 : file.gitOid}"`,
        "X-Repo-Commit": repo.commit,
      };
      if (file.lfs && !pointer) {
        headers["X-Linked-Size"] = String(file.size);
        headers["X-Linked-ETag"] = `"${file.sha256}"`;
      }
      const range = parseRange(c.req.header("range"), size);
      if (range === "invalid") {
        return new Response(null, {
          status: 416,
          headers: { ...headers, "Content-Range": `bytes */${size}` },
        });
      }
      const start = range ? range.start : 0;
      const end = range ? range.end : size - 1;
      const length = size === 0 ? 0 : end - start + 1;
      headers["Content-Length"] = String(length);
      if (range) headers["Content-Range"] = `bytes ${start}-${end}/${size}`;
      const status = range ? 206 : 200;
      if (c.req.method === "HEAD" || length === 0) return new Response(null, { status, headers });
      const body = pointer
        ? pointer.subarray(start, end + 1)
        : (Readable.toWeb(
            createReadStream(store.objectPath(file.sha256), { start, end }),
          ) as unknown as ReadableStream<Uint8Array>);
      return new Response(body, { status, headers });
    };
  for (const kind of ["resolve", "raw"] as const) {
    app.on(["GET", "HEAD"], `/:owner/:name/${kind}/:rev/:path{.+}`, fileHandler(kind));
  }

  app.notFound((c) =>
    errorJson(c, 404, `emulator has no route ${c.req.method} ${new URL(c.req.url).pathname}`),
  );
  app.onError((err, c) => c.json({ error: `emulator error: ${err.message}` }, 500));

  const server: ServerType = await new Promise((resolve) => {
    const s = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, () => resolve(s));
  });
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  let stopped: Promise<void> | null = null;
  const stop = (): Promise<void> => {
    stopped ??= (async () => {
      for (const h of holds) h.open();
      holds.clear();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        if ("closeAllConnections" in server) server.closeAllConnections();
      });
      await store.destroy();
    })();
    return stopped;
  };

  const localPath = (id: string, path: string): string | null => {
    const f = store.get(id)?.files.get(path);
    return f ? store.objectPath(f.sha256) : null;
  };

  return {
    url: baseUrl,
    async addRepo(id, files, opts = {}) {
      const [owner, name, ...rest] = id.split("/");
      if (
        !owner ||
        !name ||
        rest.length > 0 ||
        !REPO_SEGMENT.test(owner) ||
        !REPO_SEGMENT.test(name)
      ) {
        throw new Error(`invalid repo id ${id}`);
      }
      const repo = store.createRepo(id, opts.private ?? false);
      for (const [path, src] of Object.entries(files)) {
        const put = await store.putSource(src);
        repo.files.set(path, store.fileRecord(path, put.sha256, put.size, put.gitContentSha1));
      }
      repo.cardDataOverride = opts.cardData ?? null;
      repo.commit = newCommitOid();
      repo.commits.push({ oid: repo.commit, title: "seed", date: new Date() });
    },
    async readFile(id, path) {
      const p = localPath(id, path);
      return p === null ? null : readFile(p);
    },
    fileInfo(id, path) {
      return store.get(id)?.files.get(path) ?? null;
    },
    localPath,
    listRepoFiles(id) {
      const repo = store.get(id);
      return repo ? [...repo.files.keys()].sort() : null;
    },
    commitTitles(id) {
      const repo = store.get(id);
      return repo ? repo.commits.map((x) => x.title) : null;
    },
    requests,
    hold(match) {
      let open!: () => void;
      const gate = new Promise<void>((r) => (open = r));
      const entry = { match, gate, open, waiting: 0 };
      holds.add(entry);
      return {
        release() {
          holds.delete(entry);
          open();
        },
        get waiting() {
          return entry.waiting;
        },
      };
    },
    stop,
    [Symbol.asyncDispose]: stop,
  };
}
