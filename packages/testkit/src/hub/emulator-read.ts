// The hub emulator's read routes: model info, the file tree, and file downloads (resolve and raw)
// with Range and HEAD, LFS files served by content or, from raw, as their pointer.
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { Readable } from "node:stream";
import type { Context, Hono } from "hono";
import { errorJson, repoIdOf, revisionOk } from "./emulator-state.ts";
import type { EmulatorState } from "./emulator-state.ts";
import { lfsPointer } from "./repo-store.ts";
import type { RepoStore, StoredFile, StoredRepo } from "./repo-store.ts";

/** Model info and tree listings (registered before the write routes, as the hub's were). */
export function listingRoutes(app: Hono, s: EmulatorState): void {
  const infoHandler = (c: Context): Promise<Response> => modelInfo(s, c);
  app.get("/api/models/:owner/:name", infoHandler);
  app.get("/api/models/:owner/:name/revision/:rev", infoHandler);
  const treeHandler = (c: Context): Response => tree(s, c);
  app.get("/api/models/:owner/:name/tree/:rev", treeHandler);
  app.get("/api/models/:owner/:name/tree/:rev/:path{.+}", treeHandler);
}

/** File downloads, GET and HEAD, by content (`resolve`) or as stored in git (`raw`). */
export function fileRoutes(app: Hono, s: EmulatorState): void {
  for (const kind of ["resolve", "raw"] as const) {
    app.on(["GET", "HEAD"], `/:owner/:name/${kind}/:rev/:path{.+}`, (c) => serveFile(s, c, kind));
  }
}

async function modelInfo(s: EmulatorState, c: Context): Promise<Response> {
  const repo = s.readableRepo(c, repoIdOf(c));
  if (repo instanceof Response) return repo;
  const rev = c.req.param("rev");
  if (rev !== undefined && !revisionOk(repo, rev))
    return errorJson(c, 404, "Revision not found", "RevisionNotFound");
  return c.json(await modelInfoJson(s.store, repo));
}

async function modelInfoJson(store: RepoStore, repo: StoredRepo): Promise<Record<string, unknown>> {
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
}

function tree(s: EmulatorState, c: Context): Response {
  const repo = s.readableRepo(c, repoIdOf(c));
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
    expand && last ? { id: last.oid, title: last.title, date: last.date.toISOString() } : undefined;
  return c.json(treeEntries(files, under, recursive, lastCommit));
}

/** The tree entries of `files` (sorted, all under `under`): their directories, then each file. */
function treeEntries(
  files: readonly StoredFile[],
  under: string,
  recursive: boolean,
  lastCommit: { id: string; title: string; date: string } | undefined,
): Record<string, unknown>[] {
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
  return entries;
}

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

/** Headers of a download of `file` (its LFS pointer when `pointer` is set), before any Range. */
function fileHeaders(
  repo: StoredRepo,
  path: string,
  file: StoredFile,
  pointer: Buffer | null,
): Record<string, string> {
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
  return headers;
}

async function serveFile(s: EmulatorState, c: Context, kind: "resolve" | "raw"): Promise<Response> {
  const repo = s.readableRepo(c, repoIdOf(c));
  if (repo instanceof Response) return repo;
  if (!revisionOk(repo, c.req.param("rev") ?? "main"))
    return errorJson(c, 404, "Revision not found", "RevisionNotFound");
  const path = c.req.param("path") ?? "";
  const file = repo.files.get(path);
  if (!file) return errorJson(c, 404, "Entry not found", "EntryNotFound");
  const pointer =
    kind === "raw" && file.lfs ? Buffer.from(lfsPointer(file.sha256, file.size)) : null;
  const size = pointer ? pointer.length : file.size;
  const headers = fileHeaders(repo, path, file, pointer);
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
        createReadStream(s.store.objectPath(file.sha256), { start, end }),
      ) as unknown as ReadableStream<Uint8Array>);
  return new Response(body, { status, headers });
}
