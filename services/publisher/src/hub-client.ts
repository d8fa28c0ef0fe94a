// The narrow slice of the model hub the publisher needs, implemented over @huggingface/hub.
// Reads are Range requests on resolve URLs; uploads go through the LFS commit flow with byte counting.
import { createRequire } from "node:module";
import type * as HubLib from "@huggingface/hub";
import type { CommitOperation } from "@huggingface/hub";
import { PublisherError } from "./errors.ts";
import { FileSliceBlob } from "./file-blob.ts";
import type { RepoId } from "./model-ref.ts";
import { parseRepoId } from "./model-ref.ts";

// The library's CommonJS build, on purpose: under tsx on Node 20 its ESM build has its dynamic
// imports rewritten with an inline source map, which costs ~35 MiB of resident memory for the
// life of the process (docs/publisher.md, "Memory"). Same package, same version, same API.
const { commitIter, createRepo, deleteRepo, downloadFile, HubApiError, modelInfo } = createRequire(
  import.meta.url,
)("@huggingface/hub") as typeof HubLib;

/** The library's default endpoint, used when HF_ENDPOINT is not set. */
const DEFAULT_HUB_URL = "https://huggingface.co";

export interface RemoteFile {
  readonly path: string;
  readonly size: number;
  /** Bytes [start, end) in one Range request. */
  read(start: number, end: number): Promise<Uint8Array>;
  /** Bytes [start, end) as a stream from one Range request; never buffered whole. */
  stream(start: number, end: number): ReadableStream<Uint8Array>;
}

export interface HubModel {
  readonly id: RepoId;
  readonly cardData: Record<string, unknown> | null;
  readonly files: readonly string[];
}

export type UploadSource =
  | { readonly path: string; readonly localPath: string }
  | { readonly path: string; readonly text: string };

export interface UploadOptions {
  readonly title: string;
  /** Bytes of large-file (LFS) content handed to the connection so far, over all files. */
  readonly onBytes?: (sent: number) => void;
  readonly onPhase?: (phase: "preuploading" | "uploadingLargeFiles" | "committing") => void;
  readonly signal?: AbortSignal;
}

export interface HubClient {
  /** The hub endpoint as shown in messages: no credentials, query or fragment. */
  readonly url: string;
  /** Repo metadata, or null when the repo does not exist or is not visible with the token. */
  modelInfo(id: RepoId, signal?: AbortSignal): Promise<HubModel | null>;
  /** A file opened for Range reads, or null when it does not exist. */
  open(id: RepoId, path: string, signal?: AbortSignal): Promise<RemoteFile | null>;
  /** A small text file (config, index, card), or null when it does not exist. */
  readText(
    id: RepoId,
    path: string,
    maxBytes: number,
    signal?: AbortSignal,
  ): Promise<string | null>;
  ensureRepo(id: RepoId, signal?: AbortSignal): Promise<"created" | "exists">;
  deleteRepo(id: RepoId, signal?: AbortSignal): Promise<void>;
  upload(
    id: RepoId,
    files: readonly UploadSource[],
    opts: UploadOptions,
  ): Promise<{ commit: string | null }>;
}

export interface HubClientOptions {
  /** Hub base URL (HF_ENDPOINT); the library's default when absent. */
  readonly hubUrl?: string | undefined;
  /** Read at every call, so a token saved through the API applies at once. */
  readonly token: () => string | undefined;
  readonly fetch?: typeof fetch;
}

function isMissing(err: unknown): boolean {
  return err instanceof HubApiError && (err.statusCode === 404 || err.statusCode === 401);
}

/** A hub URL fit for messages and logs: userinfo, query and fragment dropped. */
export function displayHubUrl(hubUrl: string | undefined): string {
  try {
    const u = new URL(hubUrl ?? DEFAULT_HUB_URL);
    return `${u.protocol}//${u.host}${u.pathname.replace(/\/+$/, "")}`;
  } catch {
    return "(invalid hub URL)";
  }
}

/**
 * `CODE: message` of the innermost error under a failed fetch (undici's `TypeError: fetch failed`
 * or `terminated`), e.g. `ECONNREFUSED: connect ECONNREFUSED 127.0.0.1:9`; null for other errors.
 */
function transportCause(err: unknown): string | null {
  if (!(err instanceof TypeError) || !(err.cause instanceof Error)) return null;
  let e: Error = err.cause;
  for (let depth = 0; depth < 4; depth++) {
    const first: unknown = e instanceof AggregateError ? e.errors[0] : undefined;
    const next = first instanceof Error ? first : e.cause instanceof Error ? e.cause : null;
    if (!next) break;
    e = next;
  }
  const code = (e as { code?: unknown }).code;
  return typeof code === "string" ? `${code}: ${e.message}` : e.message;
}

/**
 * What went wrong talking to the hub, naming the hub and the cause (HTTP status or transport
 * error such as ECONNREFUSED); null when `err` is not a hub failure (an abort, our own error).
 */
export function describeHubFailure(
  hubUrl: string,
  err: unknown,
): { readonly detail: string; readonly retryable: boolean } | null {
  if (err instanceof PublisherError) return null;
  if (err instanceof Error && (err.name === "AbortError" || err.name === "TimeoutError"))
    return null;
  if (err instanceof Error && err.name === "ModelNotFoundError")
    return {
      detail: `the model hub at ${hubUrl} has no model ${(err as Error & { id: string }).id} (or it is not visible with the configured token)`,
      retryable: false,
    };
  if (err instanceof HubApiError) {
    return {
      detail: `the model hub at ${hubUrl} answered ${err.statusCode}: ${err.message}`,
      retryable: err.statusCode >= 500 || err.statusCode === 429,
    };
  }
  const cause = transportCause(err);
  if (cause === null) return null;
  return { detail: `cannot reach the model hub at ${hubUrl} (${cause})`, retryable: true };
}

/** A hub failure as a `hub_failed` error `<phase>: <what went wrong>`, or null (see above). */
function hubFailure(phase: string, hubUrl: string, err: unknown): PublisherError | null {
  const failure = describeHubFailure(hubUrl, err);
  if (!failure) return null;
  return new PublisherError("hub_failed", `${phase}: ${failure.detail}`, {
    cause: err,
    retryable: failure.retryable,
  });
}

/** Runs `fn`; a failed hub call inside it becomes a `hub_failed` error naming `phase`. */
export async function inPhase<T>(
  hub: Pick<HubClient, "url">,
  phase: string,
  fn: () => Promise<T>,
): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw hubFailure(phase, hub.url, err) ?? err;
  }
}

export function createHubClient(opts: HubClientOptions): HubClient {
  const baseFetch = opts.fetch ?? fetch;
  const common = (): { hubUrl?: string; accessToken?: string } => {
    const token = opts.token();
    return {
      ...(opts.hubUrl ? { hubUrl: opts.hubUrl } : {}),
      ...(token ? { accessToken: token } : {}),
    };
  };
  const withSignal =
    (signal: AbortSignal | undefined): typeof fetch =>
    (input, init) =>
      baseFetch(input, signal ? { ...init, signal } : init);

  const open = (id: RepoId, path: string, signal?: AbortSignal): Promise<RemoteFile | null> =>
    openRemote({ ...common(), repo: { type: "model", name: id }, fetch: withSignal(signal) }, path);

  return {
    url: displayHubUrl(opts.hubUrl),

    modelInfo: (id, signal) => modelInfoOf(common(), id, withSignal(signal)),

    open,

    async readText(id, path, maxBytes, signal) {
      const file = await open(id, path, signal);
      if (!file) return null;
      if (file.size > maxBytes)
        throw new Error(`${id}/${path} is ${file.size} bytes, more than the ${maxBytes} allowed`);
      if (file.size === 0) return "";
      return new TextDecoder().decode(await file.read(0, file.size));
    },

    async ensureRepo(id, signal) {
      const token = opts.token();
      if (!token) throw new Error("no model-hub token configured");
      try {
        await createRepo({
          repo: { type: "model", name: id },
          accessToken: token,
          ...(opts.hubUrl ? { hubUrl: opts.hubUrl } : {}),
          fetch: withSignal(signal),
        });
        return "created";
      } catch (err) {
        if (err instanceof HubApiError && err.statusCode === 409) return "exists";
        throw err;
      }
    },

    async deleteRepo(id, signal) {
      const token = opts.token();
      if (!token) throw new Error("no model-hub token configured");
      await deleteRepo({
        repo: { type: "model", name: id },
        accessToken: token,
        ...(opts.hubUrl ? { hubUrl: opts.hubUrl } : {}),
        fetch: withSignal(signal),
      });
    },

    upload: (id, files, o) => uploadFiles(opts, baseFetch, id, files, o),
  };
}

/** A file of a hub repo, read in ranges or streamed (null when the repo has no such file). */
async function openRemote(
  where: {
    readonly hubUrl?: string;
    readonly accessToken?: string;
    readonly repo: { readonly type: "model"; readonly name: string };
    readonly fetch: typeof fetch;
  },
  path: string,
): Promise<RemoteFile | null> {
  const blob = await downloadFile({ ...where, path, xet: false });
  if (!blob) return null;
  return {
    path,
    size: blob.size,
    async read(start, end) {
      const buf = new Uint8Array(await blob.slice(start, end).arrayBuffer());
      if (buf.byteLength !== end - start) {
        throw new Error(
          `${path}: asked for ${end - start} bytes at ${start}, got ${buf.byteLength}`,
        );
      }
      return buf;
    },
    stream: (start, end) => blob.slice(start, end).stream(),
  };
}

/**
 * The fetch of an upload. Large files go up as PUTs of a file-backed Blob; re-sending it as a
 * counted stream with an explicit length gives byte-level progress without reading the file into
 * memory.
 */
function countingUploads(
  baseFetch: typeof fetch,
  o: {
    readonly signal?: AbortSignal | undefined;
    readonly onBytes?: ((n: number) => void) | undefined;
  },
): typeof fetch {
  let sent = 0;
  return async (input, init) => {
    const body = init?.body;
    if (init?.method === "PUT" && body instanceof Blob) {
      const counted = body.stream().pipeThrough(
        new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, controller) {
            sent += chunk.byteLength;
            o.onBytes?.(sent);
            controller.enqueue(chunk);
          },
        }),
      );
      const headers = new Headers(init.headers);
      headers.set("content-length", String(body.size));
      return baseFetch(input, {
        ...init,
        body: counted,
        headers,
        duplex: "half",
        ...(o.signal ? { signal: o.signal } : {}),
      } as RequestInit);
    }
    return baseFetch(input, o.signal ? { ...init, signal: o.signal } : init);
  };
}

/** One commit of `files` to the repo `id`, with byte progress; the files that failed are named. */
async function uploadFiles(
  opts: HubClientOptions,
  baseFetch: typeof fetch,
  ...[id, files, o]: Parameters<HubClient["upload"]>
): ReturnType<HubClient["upload"]> {
  const token = opts.token();
  if (!token) throw new Error("no model-hub token configured");
  const operations: CommitOperation[] = await Promise.all(
    files.map(async (f) => ({
      operation: "addOrUpdate" as const,
      path: f.path,
      content: "localPath" in f ? await FileSliceBlob.open(f.localPath) : new Blob([f.text]),
    })),
  );
  const countingFetch = countingUploads(baseFetch, o);
  const iter = commitIter({
    repo: { type: "model", name: id },
    accessToken: token,
    ...(opts.hubUrl ? { hubUrl: opts.hubUrl } : {}),
    operations,
    title: o.title,
    useXet: false,
    fetch: countingFetch,
    ...(o.signal ? { abortSignal: o.signal } : {}),
  });
  const failed: string[] = [];
  let res = await iter.next();
  while (!res.done) {
    const ev = res.value;
    if (ev.event === "phase") o.onPhase?.(ev.phase);
    else if (ev.state === "error") {
      failed.push(ev.path);
    }
    res = await iter.next();
  }
  if (failed.length > 0) throw new Error(`upload failed for ${failed.join(", ")}`);
  return { commit: res.value?.commit.oid ?? null };
}

/** A model's card data and file list (null when the hub has no such model). */
async function modelInfoOf(
  where: { hubUrl?: string; accessToken?: string },
  id: RepoId,
  f: typeof fetch,
): ReturnType<HubClient["modelInfo"]> {
  try {
    const info = await modelInfo({
      ...where,
      name: id,
      additionalFields: ["cardData", "filePaths"],
      fetch: f,
    });
    const card = info.cardData as unknown;
    return {
      id: parseRepoId(info.name) ?? id,
      cardData:
        card && typeof card === "object" && !Array.isArray(card)
          ? (card as Record<string, unknown>)
          : null,
      files: info.filePaths ?? [],
    };
  } catch (err) {
    if (isMissing(err)) return null;
    throw err;
  }
}
