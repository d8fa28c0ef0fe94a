// What the hub emulator's route groups share: the repo store, the caller's credentials, pending LFS
// uploads, held requests and the request log, and the hub's JSON error answer.
import type { Context } from "hono";
import type { HubRequestRecord } from "./emulator.ts";
import type { RepoStore, StoredRepo } from "./repo-store.ts";

type Auth = "none" | "ok" | "bad";

/** A hold: requests it matches wait on `gate` until `open` is called. */
interface HoldEntry {
  match: (r: { method: string; path: string }) => boolean;
  gate: Promise<void>;
  open: () => void;
  waiting: number;
}

export const REPO_SEGMENT = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

export function errorJson(
  c: Context,
  status: 400 | 401 | 403 | 404 | 409 | 411 | 412 | 416 | 422,
  message: string,
  code?: string,
): Response {
  return c.json({ error: message }, status, code ? { "X-Error-Code": code } : {});
}

/** The `owner/name` repo id of a route with `:owner` and `:name` params. */
export function repoIdOf(c: Context): string {
  return `${c.req.param("owner")}/${c.req.param("name")}`;
}

/** The emulator's settings, resolved (HubEmulatorOptions with their defaults). */
export interface EmulatorSettings {
  /** The user whoami reports and the default namespace of created repos. */
  readonly user: string;
  /** LFS uploads larger than this use the multipart protocol. */
  readonly chunkSize: number;
  /** When set, the only token accepted; otherwise any bearer token is. */
  readonly token: string | undefined;
}

export class EmulatorState {
  readonly requests: HubRequestRecord[] = [];
  /** LFS objects announced by a batch request and not yet uploaded: oid to size. */
  readonly pendingUploads = new Map<string, number>();
  readonly holds = new Set<HoldEntry>();
  /** Set once the server listens; handlers read it per request. */
  baseUrl = "";
  readonly user: string;
  readonly chunkSize: number;
  private readonly token: string | undefined;

  constructor(
    /** The emulator's temp dir (the store's root; multipart parts go under `tmp/`). */
    readonly root: string,
    readonly store: RepoStore,
    { user, chunkSize, token }: EmulatorSettings,
  ) {
    this.user = user;
    this.chunkSize = chunkSize;
    this.token = token;
  }

  authOf(c: Context): Auth {
    const h = c.req.header("authorization");
    if (!h) return "none";
    const m = /^Bearer\s+(.+)$/i.exec(h);
    if (!m) return "bad";
    if (this.token === undefined) return "ok";
    return m[1] === this.token ? "ok" : "bad";
  }

  /** Resolves the repo for a read; returns an error response when it is missing or hidden. */
  readableRepo(c: Context, id: string): StoredRepo | Response {
    const auth = this.authOf(c);
    if (auth === "bad") return errorJson(c, 401, "Invalid credentials in Authorization header");
    const repo = this.store.get(id);
    if (!repo || (repo.private && auth !== "ok")) {
      return errorJson(c, repo ? 401 : 404, "Repository not found", "RepoNotFound");
    }
    return repo;
  }

  writableRepo(c: Context, id: string): StoredRepo | Response {
    const auth = this.authOf(c);
    if (auth !== "ok") return errorJson(c, 401, "Invalid credentials in Authorization header");
    const repo = this.store.get(id);
    if (!repo) return errorJson(c, 404, "Repository not found", "RepoNotFound");
    return repo;
  }
}

export function revisionOk(repo: StoredRepo, rev: string): boolean {
  const r = decodeURIComponent(rev);
  return r === "main" || r === "HEAD" || r === repo.commit || repo.commits.some((x) => x.oid === r);
}
