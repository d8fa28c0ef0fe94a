// Model-hub access through @huggingface/hub: list a repo's selected files with exact sizes and hashes,
// and open one at a byte offset (Range) so hub downloads resume like store transfers.
import { downloadFile, listFiles, modelInfo } from "@huggingface/hub";
import { z } from "zod";
import { artifactPathProblem, type ModelId } from "@ic/protocol";
import { parseContentRange } from "../transfer/range.ts";
import type { OpenedStream } from "../transfer/transfer.ts";

export interface HubFile {
  readonly path: string;
  readonly bytes: number;
  /** sha256 of LFS-stored files. */
  readonly sha256?: string | undefined;
  /** Git blob id of files stored in git itself (no LFS), used to verify them. */
  readonly gitOid?: string | undefined;
}

export interface HubListing {
  /** The commit the files were listed at (a branch or tag is resolved first). */
  readonly revision: string;
  readonly files: HubFile[];
}

/** What store-side downloads and the node's direct fallback need from a model hub. */
export interface HubSource {
  /**
   * The selected files of a repo with exact sizes: the selected manifest, at `revision` (a branch,
   * tag or commit; the source's default when absent) resolved to its commit.
   */
  list(modelId: ModelId, signal?: AbortSignal, revision?: string): Promise<HubListing>;
  /** Opens a file at `offset`; `revision` should be the listing's commit (default: the source's). */
  open(modelId: ModelId, file: HubFile, at: HubOpenAt): Promise<OpenedStream>;
}

/** Where a hub file is opened: its byte offset, at which revision. */
export interface HubOpenAt {
  readonly offset: number;
  readonly signal: AbortSignal;
  readonly revision?: string | undefined;
}

export interface HubSourceOptions {
  /** Base URL of the hub (an emulator in tests); the library's default when absent. */
  readonly hubUrl?: string | undefined;
  readonly accessToken?: string | undefined;
  readonly revision?: string | undefined;
  /** Selects the artifact files of a repo; default: every file that is a valid artifact path. */
  readonly include?: ((path: string) => boolean) | undefined;
  readonly fetch?: typeof fetch;
}

const SHA256 = /^[0-9a-f]{64}$/;
const SHA1 = /^[0-9a-f]{40}$/;
const ModelShaSchema = z.object({ sha: z.string().regex(SHA1) });

/** One entry of the hub's tree listing, validated at the edge (the library passes the JSON through). */
const TreeEntrySchema = z.object({
  path: z.string(),
  size: z.number().int().nonnegative(),
  oid: z.string().optional(),
  lfs: z.object({ oid: z.string(), size: z.number().int().nonnegative() }).optional(),
});

export function createHubSource(opts: HubSourceOptions): HubSource {
  const baseFetch = opts.fetch ?? fetch;
  const defaultRevision = opts.revision ?? "main";
  const common = {
    ...(opts.hubUrl ? { hubUrl: opts.hubUrl } : {}),
    ...(opts.accessToken ? { accessToken: opts.accessToken } : {}),
  };
  return {
    async list(modelId, signal, asked) {
      const files: HubFile[] = [];
      const f: typeof fetch = (input, init) =>
        baseFetch(input, { ...init, ...(signal ? { signal } : {}) });
      // A branch moves: list and download at the commit it names now, so the files agree.
      const revision = await commitOf(common, modelId, asked ?? defaultRevision, f);
      for await (const raw of listFiles({
        ...common,
        revision,
        repo: { type: "model", name: modelId },
        recursive: true,
        fetch: f,
      })) {
        if (raw.type !== "file") continue;
        const file = hubFileOf(modelId, raw, opts.include);
        if (file) files.push(file);
      }
      files.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
      return { revision, files };
    },

    async open(modelId, file, { offset, signal, revision }) {
      let capture: ((res: Response) => void) | null = null;
      let fail: ((e: unknown) => void) | null = null;
      const served = new Promise<number>((resolve, reject) => {
        capture = (res) => {
          if (res.status === 206)
            resolve(parseContentRange(res.headers.get("content-range"))?.start ?? -1);
          else resolve(0);
        };
        fail = reject;
      });
      // Only awaited for ranged opens; never let an unawaited rejection escape.
      served.catch(() => undefined);
      let armed = false;
      const f: typeof fetch = async (input, init) => {
        try {
          const res = await baseFetch(input, { ...init, signal });
          if (armed) capture?.(res);
          return res;
        } catch (e) {
          if (armed) fail?.(e);
          throw e;
        }
      };
      const blob = await downloadFile({
        ...common,
        revision: revision ?? defaultRevision,
        repo: { type: "model", name: modelId },
        path: file.path,
        fetch: f,
        xet: false,
      });
      if (!blob) throw new Error(`${file.path} not found in ${modelId} on the hub`);
      if (blob.size !== file.bytes) {
        throw new Error(
          `hub reports ${blob.size} bytes for ${file.path}, listing said ${file.bytes}`,
        );
      }
      armed = true;
      const body = offset > 0 ? blob.slice(offset).stream() : blob.stream();
      return { body, offset: offset > 0 ? await served : 0 };
    },
  };
}

/** The commit a revision names now (a commit id names itself). */
async function commitOf(
  common: { hubUrl?: string; accessToken?: string },
  modelId: ModelId,
  revision: string,
  f: typeof fetch,
): Promise<string> {
  if (SHA1.test(revision)) return revision;
  const info = ModelShaSchema.safeParse(
    await modelInfo({ ...common, name: modelId, revision, additionalFields: ["sha"], fetch: f }),
  );
  if (!info.success) throw new Error(`the hub named no commit for ${modelId} at ${revision}`);
  return info.data.sha;
}

/**
 * One entry of the hub's tree as a file to take: validated, only artifact paths (and those
 * `include` keeps), with its LFS SHA-256 or its git blob id when the hub gave one.
 */
function hubFileOf(
  modelId: ModelId,
  raw: unknown,
  include: ((path: string) => boolean) | undefined,
): HubFile | undefined {
  const parsed = TreeEntrySchema.safeParse(raw);
  if (!parsed.success)
    throw new Error(`invalid tree entry from the hub for ${modelId}: ${parsed.error.message}`);
  const entry = parsed.data;
  if (artifactPathProblem(entry.path) !== null) return undefined;
  if (include && !include(entry.path)) return undefined;
  const lfsSha = entry.lfs?.oid;
  return {
    path: entry.path,
    bytes: entry.size,
    sha256: lfsSha && SHA256.test(lfsSha) ? lfsSha : undefined,
    gitOid: !entry.lfs && entry.oid && SHA1.test(entry.oid) ? entry.oid : undefined,
  };
}
