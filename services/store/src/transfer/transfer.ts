// Resumable, verified transfer of one artifact file: bytes land in a hidden `.part` beside the final
// name, a restart continues from the partial's length, and only a verified file is renamed into place.
//
// Throughput: bytes go into large shared slabs (slab-pipeline.ts), straight from the socket for store
// files (direct-get.ts) or copied chunk by chunk from a web stream (an injected fetch, the hub); each
// full slab goes at once to the write worker and to the hash worker (slab-worker.ts), so receiving,
// writing and hashing run on three threads; a write-behind datasync keeps the disk busy during the
// transfer, and the partial is fsynced once more, before the rename.
// Invariants: every byte received before an error or an abort is written to the partial before the
// transfer fails (the next attempt resumes after it); the digest always covers the whole file, the
// partial's prefix included.
// A source that stops sending (a stalled connection, a peer whose link went down without a reset)
// fails the transfer after `idleTimeoutMs` without a byte, the partial kept: without that bound a
// transfer could wait forever at the same byte, and its runner with it.
import { mkdir, open, rename, rm, stat, type FileHandle } from "node:fs/promises";
import { dirname } from "node:path";
import type { DirectBody, DirectSink } from "./direct-get.ts";
import {
  SlabWorkerError,
  sharedHashWorker,
  sharedWriteWorker,
  type Digests,
  type HashJob,
  type SlabWorker,
} from "./slab-worker.ts";
import { isErrno, partFile } from "../paths.ts";
import { SlabPipeline } from "./slab-pipeline.ts";
import { ConfigSchema } from "@ic/config";

export const TRANSFER_FAILURES = ["transfer", "integrity", "aborted"] as const;
export type TransferFailure = (typeof TRANSFER_FAILURES)[number];

/** A failed transfer; `kind` says whether the partial is kept for resume (transfer, aborted) or not. */
export class TransferError extends Error {
  constructor(
    readonly kind: TransferFailure,
    message: string,
    options: { cause?: unknown } = {},
  ) {
    super(message, options);
    this.name = "TransferError";
  }
}

export interface TransferTarget {
  /** Manifest path, for messages. */
  readonly path: string;
  readonly bytes: number;
  /** Expected sha256; when absent the digest is computed and returned. */
  readonly sha256?: string | undefined;
  /** Expected git blob id (sha1 of `blob <size>\0<content>`), for small hub files without sha256. */
  readonly gitOid?: string | undefined;
}

export interface OpenedStream {
  /** A web stream (fetch, the hub) or a body read straight into the slabs; the transfer owns it. */
  readonly body: ReadableStream<Uint8Array> | DirectBody;
  /** Offset of the first byte the source sends: the requested offset, or 0 if it ignored the range. */
  readonly offset: number;
}

/** Opens the remote file at `offset`; a source that cannot do ranges answers with offset 0. */
export type OpenAt = (offset: number, signal: AbortSignal) => Promise<OpenedStream>;

/**
 * How long a transfer waits for the source's next byte (or its answer) before it fails, unless the
 * caller says: `model_store.transfer_idle_timeout_ms`'s default, read from the schema that defines it.
 */
export const DEFAULT_TRANSFER_IDLE_MS = ConfigSchema.shape.model_store.parse(
  {},
).transfer_idle_timeout_ms;

export interface TransferOutcome {
  readonly sha256: string;
  /** Bytes fetched by this call. */
  readonly fetchedBytes: number;
  /** Bytes reused from an earlier partial. */
  readonly resumedBytes: number;
}

export async function partialBytes(finalPath: string): Promise<number> {
  try {
    return (await stat(partFile(finalPath))).size;
  } catch (e) {
    if (isErrno(e, "ENOENT")) return 0;
    throw e;
  }
}

/**
 * Fetches `file` into `finalPath` through its partial. On abort or a network error the partial stays
 * (with every byte received) for the next attempt; on a hash mismatch it is deleted. `onBytes` sees
 * every chunk received; each reaches the partial, also when the transfer then fails. Hashing runs on
 * `hasher` and writing on `writer` (default: the process-wide hash and write workers).
 */
export async function transferFile(args: {
  readonly finalPath: string;
  readonly file: TransferTarget;
  readonly open: OpenAt;
  readonly signal: AbortSignal;
  readonly onBytes?: ((delta: number) => void) | undefined;
  readonly hasher?: SlabWorker | undefined;
  readonly writer?: SlabWorker | undefined;
  /** The longest wait for the source's answer or its next byte (DEFAULT_TRANSFER_IDLE_MS). */
  readonly idleTimeoutMs?: number | undefined;
}): Promise<TransferOutcome> {
  const { file } = args;
  const idle = new IdleBound(args.idleTimeoutMs ?? DEFAULT_TRANSFER_IDLE_MS, args.signal);
  try {
    return await transferBounded({ ...args, signal: idle.signal }, idle);
  } catch (e) {
    // The bound fired, not the caller: a retryable failure that says what happened.
    if (idle.fired && !args.signal.aborted && !(e instanceof TransferError && e.kind !== "aborted"))
      throw new TransferError(
        "transfer",
        `${file.path}: the source sent nothing for ${idle.ms} ms (stalled); the partial is kept`,
        { cause: e },
      );
    throw e;
  } finally {
    idle.dispose();
  }
}

/**
 * An abort signal that fires after `ms` without a `touch()` (or with the parent's abort). Touched at
 * each chunk received; paused once the body is in (hashing and fsync are local work).
 */
class IdleBound {
  private readonly controller = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private readonly onParent: () => void;
  fired = false;
  readonly signal: AbortSignal;
  constructor(
    readonly ms: number,
    private readonly parent: AbortSignal,
  ) {
    this.onParent = () => this.controller.abort(parent.reason);
    if (parent.aborted) this.controller.abort(parent.reason);
    else parent.addEventListener("abort", this.onParent, { once: true });
    this.signal = this.controller.signal;
    this.touch();
  }
  touch(): void {
    clearTimeout(this.timer);
    if (this.controller.signal.aborted) return;
    this.timer = setTimeout(() => {
      this.fired = true;
      this.controller.abort(new Error(`no byte for ${this.ms} ms`));
    }, this.ms);
    this.timer.unref();
  }
  dispose(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.parent.removeEventListener("abort", this.onParent);
  }
}

/** Opens the source at `have` bytes; a failure is a typed transfer error (aborted, or not). */
async function openSource(
  args: Pick<Parameters<typeof transferFile>[0], "open" | "signal" | "file">,
  have: number,
): Promise<OpenedStream> {
  try {
    return await args.open(have, args.signal);
  } catch (e) {
    if (args.signal.aborted)
      throw new TransferError("aborted", `transfer of ${args.file.path} aborted`, { cause: e });
    throw new TransferError("transfer", `cannot fetch ${args.file.path}: ${errText(e)}`, {
      cause: e,
    });
  }
}

/**
 * Verify and commit, last step of a file: its hashes against the manifest's (a mismatch deletes
 * the partial: integrity error), then the partial renamed into place.
 */
async function verifyAndCommit(
  part: string,
  finalPath: string,
  file: {
    readonly path: string;
    readonly sha256?: string | undefined;
    readonly gitOid?: string | undefined;
  },
  digests: Digests,
): Promise<void> {
  const digest = digests.sha256;
  const gitDigest = digests.gitOid;
  if ((file.sha256 && digest !== file.sha256) || (file.gitOid && gitDigest !== file.gitOid)) {
    await rm(part, { force: true });
    const expected = file.sha256 ? `sha256 ${file.sha256}` : `git oid ${file.gitOid}`;
    const got = file.sha256 ? `sha256 ${digest}` : `git oid ${gitDigest}`;
    throw new TransferError(
      "integrity",
      `${file.path}: expected ${expected}, got ${got}; partial deleted`,
    );
  }
  await rename(part, finalPath);
}

/**
 * The file's fsync (before the rename: the write-behind left it only the tail to flush) while its
 * hash completes; the digests.
 */
async function syncAndHash(
  fh: FileHandle,
  job: ReturnType<typeof beginHash>,
  part: string,
  path: string,
): Promise<Digests> {
  const synced = fh.sync();
  synced.catch(() => undefined);
  const digests = await hashed(job.digest(), path);
  try {
    await synced;
  } catch (e) {
    throw new TransferError("transfer", `cannot fsync ${part}: ${errText(e)}`, { cause: e });
  }
  return digests;
}

async function transferBounded(
  args: Parameters<typeof transferFile>[0],
  idle: IdleBound,
): Promise<TransferOutcome> {
  const { finalPath, file, signal } = args;
  const hasher = args.hasher ?? sharedHashWorker();
  const part = partFile(finalPath);
  await mkdir(dirname(finalPath), { recursive: true });
  let have = await partialBytes(finalPath);
  if (have > file.bytes) {
    await rm(part, { force: true });
    have = 0;
  }
  const resumedFrom = have;
  const gitBlobBytes = file.gitOid ? file.bytes : undefined;
  // The worker hashes the partial's prefix while the source is being opened.
  let job = beginHash(hasher, { prefixPath: part, prefixBytes: have, gitBlobBytes }, file.path);
  let fetched = 0;
  let fh: FileHandle | undefined;
  let digests: Digests;
  try {
    let opened: OpenedStream | undefined;
    if (have < file.bytes) {
      opened = await openSource(args, have);
      if (opened.offset !== have) {
        if (opened.offset !== 0) {
          await discard(opened.body);
          throw new TransferError(
            "transfer",
            `source sent ${file.path} from byte ${opened.offset}, not ${have}`,
          );
        }
        // The source ignored the range: start over (opening with "w" below truncates the partial).
        job.drop();
        have = 0;
        job = beginHash(hasher, { prefixBytes: 0, gitBlobBytes }, file.path);
      }
    }
    try {
      fh = await open(part, have > 0 ? "r+" : "w");
    } catch (e) {
      if (opened) await discard(opened.body);
      throw new TransferError("transfer", `cannot open ${part}: ${errText(e)}`, { cause: e });
    }
    if (opened) {
      fetched = await receive({
        body: opened.body,
        fh,
        writer: args.writer ?? sharedWriteWorker(),
        at: have,
        limit: file.bytes - have,
        job,
        signal,
        onBytes: (n) => {
          idle.touch();
          args.onBytes?.(n);
        },
        path: file.path,
        fileBytes: file.bytes,
      });
      if (have + fetched !== file.bytes) {
        throw new TransferError(
          "transfer",
          `short transfer of ${file.path}: ${have + fetched} of ${file.bytes} bytes`,
        );
      }
    }
    idle.dispose();
    digests = await syncAndHash(fh, job, part, file.path);
  } catch (e) {
    job.drop();
    await fh?.close().catch(() => undefined);
    throw e;
  }
  await fh.close();

  await verifyAndCommit(part, finalPath, file, digests);
  return { sha256: digests.sha256, fetchedBytes: fetched, resumedBytes: resumedFrom };
}

function beginHash(
  hasher: SlabWorker,
  start: Parameters<SlabWorker["begin"]>[0],
  path: string,
): HashJob {
  try {
    return hasher.begin(start);
  } catch (e) {
    throw new TransferError("transfer", `cannot hash ${path}: ${errText(e)}`, { cause: e });
  }
}

/** A hash worker failure is a retryable transfer failure: the bytes on disk are kept. */
async function hashed<T>(p: Promise<T>, path: string): Promise<T> {
  try {
    return await p;
  } catch (e) {
    throw new TransferError("transfer", `hashing ${path} failed: ${errText(e)}`, { cause: e });
  }
}

/** Cancels a body the transfer will not read. */
export async function discard(body: OpenedStream["body"]): Promise<void> {
  if ("getReader" in body) await body.cancel().catch(() => undefined);
  else body.cancel();
}

/**
 * Feeds the body into a slab pipeline. Returns the bytes received; on any failure, first writes what
 * was received, then throws a TransferError.
 */
async function receive(a: {
  readonly body: OpenedStream["body"];
  readonly fh: FileHandle;
  readonly writer: SlabWorker;
  readonly at: number;
  readonly limit: number;
  readonly job: HashJob;
  readonly signal: AbortSignal;
  readonly onBytes: ((delta: number) => void) | undefined;
  readonly path: string;
  readonly fileBytes: number;
}): Promise<number> {
  let writes;
  try {
    writes = a.writer.openWrites(a.fh.fd);
  } catch (e) {
    await discard(a.body);
    throw new TransferError("transfer", `cannot write ${a.path}: ${errText(e)}`, { cause: e });
  }
  const pipe = new SlabPipeline({
    fh: a.fh,
    writer: writes,
    at: a.at,
    expectBytes: a.limit,
    job: a.job,
    onBytes: a.onBytes,
  });
  const tooMuch = () =>
    new TransferError(
      "transfer",
      `source sent more than the manifest's ${a.fileBytes} bytes for ${a.path}`,
    );
  let failure: { error: unknown } | undefined;
  try {
    if (a.signal.aborted) throw a.signal.reason;
    if ("getReader" in a.body) {
      await pullWeb(a.body, a.signal, (chunk) => {
        if (pipe.received + chunk.length > a.limit) throw tooMuch();
        return pipe.push(chunk);
      });
    } else {
      // A direct body never sends more than it announced.
      if (a.body.length > a.limit) throw tooMuch();
      const sink: DirectSink = {
        space: () => pipe.space(),
        commit: (n) => pipe.commit(n),
        push: (chunk) => pipe.push(chunk),
        ready: () => pipe.ready(),
      };
      await a.body.run(sink, a.signal);
    }
    if (a.signal.aborted) throw a.signal.reason;
  } catch (e) {
    failure = { error: e };
    await discard(a.body);
  }
  // Whatever arrived goes to the partial, also after an error: the next attempt resumes after it.
  try {
    await pipe.finish();
  } catch (e) {
    failure ??= { error: e };
  }
  writes.end();
  if (failure) {
    const e = failure.error;
    if (e instanceof TransferError) throw e;
    if (a.signal.aborted)
      throw new TransferError("aborted", `transfer of ${a.path} aborted`, { cause: e });
    if (e instanceof SlabWorkerError)
      throw new TransferError("transfer", `hashing ${a.path} failed: ${errText(e)}`, { cause: e });
    throw new TransferError("transfer", `transfer of ${a.path} failed: ${errText(e)}`, {
      cause: e,
    });
  }
  return pipe.received;
}

/** Reads a web stream chunk by chunk into `push`; an abort cancels the pending read. */
export async function pullWeb(
  body: ReadableStream<Uint8Array>,
  signal: AbortSignal,
  push: (chunk: Uint8Array) => Promise<void> | undefined,
): Promise<void> {
  const reader = body.getReader();
  const onAbort = () => void reader.cancel(signal.reason).catch(() => undefined);
  signal.addEventListener("abort", onAbort, { once: true });
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      const wait = push(value);
      if (wait) await wait;
    }
  } finally {
    signal.removeEventListener("abort", onAbort);
    reader.releaseLock();
  }
}

export function errText(e: unknown): string {
  if (e instanceof Error) {
    const cause = e.cause instanceof Error ? `: ${e.cause.message}` : "";
    return `${e.message}${cause}`;
  }
  return String(e);
}
