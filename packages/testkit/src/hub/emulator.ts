// A local model-hub emulator: the HTTP calls @huggingface/hub v2 makes, served from a temp dir.
// Model info, tree, resolve/raw with Range and HEAD, whoami, repo creation, preupload, LFS batch
// (basic and multipart) and the ndjson commit; uploads are verified against their sha256.
// This module starts the server, logs and holds requests, and answers the test's own calls; the
// routes live in emulator-read.ts, emulator-write.ts and emulator-lfs.ts.
import { mkdtemp, readFile } from "node:fs/promises";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { serve } from "@hono/node-server";
import type { ServerType } from "@hono/node-server";
import { Hono } from "hono";
import type { CardData } from "./front-matter.ts";
import { fileRoutes, listingRoutes } from "./emulator-read.ts";
import { lfsRoutes } from "./emulator-lfs.ts";
import { EmulatorState, errorJson, REPO_SEGMENT } from "./emulator-state.ts";
import { commitRoute, repoRoutes, whoamiRoute } from "./emulator-write.ts";
import { newCommitOid, RepoStore } from "./repo-store.ts";
import type { HubFileSource, StoredFile } from "./repo-store.ts";

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

const DEFAULT_CHUNK = 8 * 1024 * 1024;

export async function startHubEmulator(options: HubEmulatorOptions = {}): Promise<HubEmulator> {
  const root = await mkdtemp(join(tmpdir(), "hub-emulator-"));
  const store = new RepoStore(root);
  await store.init();
  const s = new EmulatorState(root, store, {
    user: options.user ?? "emulator-user",
    chunkSize: options.multipartChunkSize ?? DEFAULT_CHUNK,
    token: options.token,
  });
  const server = await listen(emulatorApp(s));
  s.baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  let stopped: Promise<void> | null = null;
  const stop = (): Promise<void> => {
    stopped ??= (async () => {
      for (const h of s.holds) h.open();
      s.holds.clear();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        if ("closeAllConnections" in server) server.closeAllConnections();
      });
      await store.destroy();
    })();
    return stopped;
  };
  return emulatorHandle(s, stop);
}

/** The app: holds and the request log around every route group, in the hub's order. */
function emulatorApp(s: EmulatorState): Hono {
  const app = new Hono();
  app.use("*", async (c, next) => {
    const url = new URL(c.req.url);
    const path = url.pathname + url.search;
    for (const h of s.holds) {
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
    s.requests.push({
      method: c.req.method,
      path,
      range: c.req.header("range") ?? null,
      status: c.res.status,
      authorized: c.req.header("authorization") !== undefined,
    });
  });
  whoamiRoute(app, s);
  listingRoutes(app, s);
  repoRoutes(app, s);
  lfsRoutes(app, s);
  commitRoute(app, s);
  fileRoutes(app, s);
  app.notFound((c) =>
    errorJson(c, 404, `emulator has no route ${c.req.method} ${new URL(c.req.url).pathname}`),
  );
  app.onError((err, c) => c.json({ error: `emulator error: ${err.message}` }, 500));
  return app;
}

function listen(app: Hono): Promise<ServerType> {
  return new Promise((resolve) => {
    const s = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, () => resolve(s));
  });
}

/** What the test holds: seeding and reading repos directly, the request log, holds, stop. */
function emulatorHandle(s: EmulatorState, stop: () => Promise<void>): HubEmulator {
  const { store } = s;
  const localPath = (id: string, path: string): string | null => {
    const f = store.get(id)?.files.get(path);
    return f ? store.objectPath(f.sha256) : null;
  };
  return {
    url: s.baseUrl,
    addRepo: (id, files, opts = {}) => addRepo(store, id, files, opts),
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
    requests: s.requests,
    hold(match) {
      let open!: () => void;
      const gate = new Promise<void>((r) => (open = r));
      const entry = { match, gate, open, waiting: 0 };
      s.holds.add(entry);
      return {
        release() {
          s.holds.delete(entry);
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

async function addRepo(
  store: RepoStore,
  id: string,
  files: Readonly<Record<string, HubFileSource>>,
  opts: AddRepoOptions,
): Promise<void> {
  const [owner, name, ...rest] = id.split("/");
  if (!owner || !name || rest.length > 0 || !REPO_SEGMENT.test(owner) || !REPO_SEGMENT.test(name)) {
    throw new Error(`invalid repo id ${id}`);
  }
  const repo = store.createRepo(id, opts.private ?? false);
  for (const [path, src] of Object.entries(files)) {
    const put = await store.putSource(src);
    repo.files.set(path, store.fileRecord(path, put));
  }
  repo.cardDataOverride = opts.cardData ?? null;
  repo.commit = newCommitOid();
  repo.commits.push({ oid: repo.commit, title: "seed", date: new Date() });
}
