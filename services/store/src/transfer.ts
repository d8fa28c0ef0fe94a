// Resumable, verified transfer of one artifact file: bytes land in a hidden `.part` beside the final
// name, a restart continues from the partial's length, and only a verified file is renamed into place.
import { createWriteStream } from "node:fs";
import { mkdir, open, rename, rm, stat, truncate } from "node:fs/promises";
import { createHash } from "node:crypto";
import { dirname } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
import { hashPrefixInto, isErrno, partFile } from "./paths.ts";

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
  readonly body: ReadableStream<Uint8Array>;
  /** Offset of the first byte the source sends: the requested offset, or 0 if it ignored the range. */
  readonly offset: number;
}

/** Opens the remote file at `offset`; a source that cannot do ranges answers with offset 0. */
export type OpenAt = (offset: number, signal: AbortSignal) => Promise<OpenedStream>;

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
 * for the next attempt; on a hash mismatch it is deleted. `onBytes` sees every chunk written.
 */
export async function transferFile(args: {
  readonly finalPath: string;
  readonly file: TransferTarget;
  readonly open: OpenAt;
  readonly signal: AbortSignal;
  readonly onBytes?: (delta: number) => void;
}): Promise<TransferOutcome> {
  const { finalPath, file, signal } = args;
  const part = partFile(finalPath);
  await mkdir(dirname(finalPath), { recursive: true });
  let have = await partialBytes(finalPath);
  if (have > file.bytes) {
    await rm(part, { force: true });
    have = 0;
  }
  let sha = createHash("sha256");
  let git = file.gitOid ? createHash("sha1").update(`blob ${file.bytes}\0`) : null;
  await hashPrefixInto(sha, part, have);
  if (git) await hashPrefixInto(git, part, have);
  const resumedFrom = have;
  let fetched = 0;

  if (have < file.bytes) {
    let opened: OpenedStream;
    try {
      opened = await args.open(have, signal);
    } catch (e) {
      if (signal.aborted)
        throw new TransferError("aborted", `transfer of ${file.path} aborted`, { cause: e });
      throw new TransferError("transfer", `cannot fetch ${file.path}: ${errText(e)}`, { cause: e });
    }
    if (opened.offset !== have) {
      if (opened.offset !== 0) {
        await opened.body.cancel().catch(() => undefined);
        throw new TransferError(
          "transfer",
          `source sent ${file.path} from byte ${opened.offset}, not ${have}`,
        );
      }
      // The source ignored the range: start over.
      await truncate(part, 0).catch(() => undefined);
      have = 0;
      sha = createHash("sha256");
      git = file.gitOid ? createHash("sha1").update(`blob ${file.bytes}\0`) : null;
    }
    const out = createWriteStream(part, { flags: have > 0 ? "a" : "w" });
    const limit = file.bytes - have;
    try {
      await pipeline(
        Readable.fromWeb(opened.body as NodeReadableStream<Uint8Array>),
        async function* (source: AsyncIterable<Buffer>) {
          for await (const chunk of source) {
            if (fetched + chunk.length > limit) {
              throw new TransferError(
                "transfer",
                `source sent more than the manifest's ${file.bytes} bytes for ${file.path}`,
              );
            }
            sha.update(chunk);
            git?.update(chunk);
            fetched += chunk.length;
            args.onBytes?.(chunk.length);
            yield chunk;
          }
        },
        out,
        { signal },
      );
    } catch (e) {
      if (e instanceof TransferError) throw e;
      if (signal.aborted)
        throw new TransferError("aborted", `transfer of ${file.path} aborted`, { cause: e });
      throw new TransferError("transfer", `transfer of ${file.path} failed: ${errText(e)}`, {
        cause: e,
      });
    }
    if (have + fetched !== file.bytes) {
      throw new TransferError(
        "transfer",
        `short transfer of ${file.path}: ${have + fetched} of ${file.bytes} bytes`,
      );
    }
  } else if (file.bytes === 0) {
    await (await open(part, "w")).close();
  }

  const digest = sha.digest("hex");
  const gitDigest = git?.digest("hex");
  if ((file.sha256 && digest !== file.sha256) || (file.gitOid && gitDigest !== file.gitOid)) {
    await rm(part, { force: true });
    const expected = file.sha256 ? `sha256 ${file.sha256}` : `git oid ${file.gitOid}`;
    const got = file.sha256 ? `sha256 ${digest}` : `git oid ${gitDigest}`;
    throw new TransferError(
      "integrity",
      `${file.path}: expected ${expected}, got ${got}; partial deleted`,
    );
  }
  const fh = await open(part, "r+");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(part, finalPath);
  return { sha256: digest, fetchedBytes: fetched, resumedBytes: resumedFrom };
}

export function errText(e: unknown): string {
  if (e instanceof Error) {
    const cause = e.cause instanceof Error ? `: ${e.cause.message}` : "";
    return `${e.message}${cause}`;
  }
  return String(e);
}
