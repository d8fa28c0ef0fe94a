// The hub emulator's account and write routes: whoami, repo creation and deletion, preupload (which
// files go to LFS) and the ndjson commit that applies regular, LFS and deleted files at once.
import { createHash } from "node:crypto";
import type { Context, Hono } from "hono";
import { z } from "zod";
import { errorJson, repoIdOf, REPO_SEGMENT } from "./emulator-state.ts";
import type { EmulatorState } from "./emulator-state.ts";
import { isLfsPath, newCommitOid } from "./repo-store.ts";
import type { StoredFile, StoredRepo } from "./repo-store.ts";

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
type CommitLine = z.infer<typeof CommitLineSchema>;

export function whoamiRoute(app: Hono, s: EmulatorState): void {
  app.get("/api/whoami-v2", (c) => {
    if (s.authOf(c) !== "ok")
      return errorJson(c, 401, "Invalid credentials in Authorization header");
    return c.json({
      type: "user",
      id: createHash("sha1").update(s.user).digest("hex").slice(0, 24),
      name: s.user,
      fullname: s.user,
      email: `${s.user}@example.invalid`,
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
}

/** Repo creation and deletion, and preupload. */
export function repoRoutes(app: Hono, s: EmulatorState): void {
  app.post("/api/repos/create", async (c) => {
    const r = await repoRequest(s, c);
    if (r.answer) return r.answer;
    const { id, body } = r;
    if (s.store.get(id))
      return c.json(
        { error: "You already created this model repo", url: `${s.baseUrl}/${id}` },
        409,
      );
    s.store.createRepo(id, body.private ?? body.visibility === "private");
    return c.json({ url: `${s.baseUrl}/${id}`, name: id, id });
  });

  // The hub's repo deletion (what @huggingface/hub's deleteRepo sends): owner-authenticated.
  app.delete("/api/repos/delete", async (c) => {
    const r = await repoRequest(s, c);
    if (r.answer) return r.answer;
    if (!s.store.deleteRepo(r.id)) return errorJson(c, 404, `Repository ${r.id} not found`);
    return c.json({});
  });

  app.post("/api/models/:owner/:name/preupload/:rev", async (c) => {
    const repo = s.writableRepo(c, repoIdOf(c));
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
}

/** The repo a create or delete request names, or the error answer (auth, body, name). */
async function repoRequest(s: EmulatorState, c: Context) {
  if (s.authOf(c) !== "ok")
    return { answer: errorJson(c, 401, "Invalid credentials in Authorization header") };
  const body = CreateRepoSchema.safeParse(await c.req.json().catch(() => null));
  if (!body.success)
    return {
      answer: errorJson(c, 400, `invalid body: ${body.error.issues[0]?.message ?? "?"}`),
    };
  if ((body.data.type ?? "model") !== "model")
    return { answer: errorJson(c, 400, "the emulator only hosts model repos") };
  const owner = body.data.organization ?? s.user;
  if (!REPO_SEGMENT.test(owner) || !REPO_SEGMENT.test(body.data.name))
    return { answer: errorJson(c, 400, "invalid repo name") };
  return { id: `${owner}/${body.data.name}`, body: body.data };
}

export function commitRoute(app: Hono, s: EmulatorState): void {
  app.post("/api/models/:owner/:name/commit/:rev", (c) => commit(s, c, c.req.param("rev")));
}

async function commit(s: EmulatorState, c: Context, revParam: string): Promise<Response> {
  const repo = s.writableRepo(c, repoIdOf(c));
  if (repo instanceof Response) return repo;
  const rev = decodeURIComponent(revParam);
  if (rev !== "main")
    return errorJson(c, 404, "the emulator only has a main branch", "RevisionNotFound");
  const parsed = parseCommitLines(c, await c.req.text());
  if (parsed instanceof Response) return parsed;
  const header = parsed[0];
  if (!header || header.key !== "header")
    return errorJson(c, 400, "commit must start with a header line");
  if (header.value.parentCommit && header.value.parentCommit !== repo.commit) {
    return errorJson(c, 412, "parent commit is not the head of the branch");
  }
  const next = await applyCommitOps(s, c, repo, parsed.slice(1));
  if (next instanceof Response) return next;
  repo.files = next;
  repo.commit = newCommitOid();
  repo.lastModified = new Date();
  repo.commits.push({ oid: repo.commit, title: header.value.summary, date: repo.lastModified });
  return c.json({
    success: true,
    commitOid: repo.commit,
    commitUrl: `${s.baseUrl}/${repo.id}/commit/${repo.commit}`,
    hookOutput: "",
    pullRequestUrl: undefined,
  });
}

/** The commit body's lines (ndjson, blank lines skipped), or the 400 answer for the first bad one. */
function parseCommitLines(c: Context, text: string): CommitLine[] | Response {
  const lines = text.split("\n").filter((l) => l.trim() !== "");
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
  return parsed;
}

/** The repo's files after the commit's operations, or the error answer of the first that fails. */
async function applyCommitOps(
  s: EmulatorState,
  c: Context,
  repo: StoredRepo,
  ops: readonly CommitLine[],
): Promise<Map<string, StoredFile> | Response> {
  const next = new Map(repo.files);
  for (const op of ops) {
    switch (op.key) {
      case "header":
        return errorJson(c, 400, "only one header line is allowed");
      case "file": {
        const bytes =
          op.value.encoding === "base64"
            ? Buffer.from(op.value.content, "base64")
            : Buffer.from(op.value.content);
        const put = await s.store.putSource(bytes);
        next.set(op.value.path, s.store.fileRecord(op.value.path, put));
        break;
      }
      case "lfsFile": {
        if (!(await s.store.hasObject(op.value.oid, op.value.size))) {
          return errorJson(
            c,
            422,
            `LFS object ${op.value.oid} for ${op.value.path} was never uploaded`,
          );
        }
        next.set(
          op.value.path,
          s.store.fileRecord(
            op.value.path,
            { sha256: op.value.oid, size: op.value.size, gitContentSha1: "" },
            true,
          ),
        );
        break;
      }
      case "deletedFile":
        if (!next.delete(op.value.path))
          return errorJson(c, 404, `${op.value.path} does not exist`, "EntryNotFound");
        break;
    }
  }
  return next;
}
