// Filling a model directory from a file list: decide per file whether it is already present, can be
// hardlinked from the store, resumes a partial or must be fetched, and so the exact additional bytes.
import { link, lstat, rename, rm } from "node:fs/promises";
import { randomBytes } from "node:crypto";
import { basename, dirname, join } from "node:path";
import { mkdir } from "node:fs/promises";
import { artifactFile, isErrno, partFile, walkFiles } from "../paths.ts";
import { sameContent, type RecordFile, type StagingRecord } from "../record.ts";
import type { PieceSet } from "../pieces.ts";
import {
  dropPiecePartial,
  fetchPieces,
  keptPartialBytes,
  piecesFile,
  type PieceFile,
  type PieceSource,
} from "./piece-fetch.ts";
import { DEFAULT_TRANSFER_IDLE_MS, transferFile, type OpenAt } from "./transfer.ts";

export type FileActionKind = "present" | "link" | "resume" | "fetch";

export interface FileAction {
  readonly file: RecordFile;
  readonly kind: FileActionKind;
  /** Bytes already on the target filesystem for this file (complete file or resumable partial). */
  readonly presentBytes: number;
  /** Source of a hardlink. */
  readonly linkFrom?: string;
}

export interface FillPlan {
  readonly actions: FileAction[];
  /** Sum of the file sizes: the exact selected manifest total. */
  readonly manifestBytes: number;
  /** Bytes the fill will newly allocate: manifest minus present, resumable and hardlinked bytes. */
  readonly additionalBytes: number;
}

async function sizeOf(path: string): Promise<number | null> {
  try {
    const s = await lstat(path);
    return s.isFile() ? s.size : null;
  } catch (e) {
    if (isErrno(e, "ENOENT") || isErrno(e, "ENOTDIR")) return null;
    throw e;
  }
}

/**
 * Plans a fill of `dir` with `files`. A final file counts as present only when the prior record
 * describes the same content; a partial is resumable only then too. With `linkFromDir` (a store model
 * directory on the same filesystem), files of the right size there are hardlinked and count zero.
 */
export async function planFill(
  dir: string,
  files: readonly RecordFile[],
  prior: StagingRecord | null,
  linkFromDir?: string,
): Promise<FillPlan> {
  const priorByPath = new Map((prior?.files ?? []).map((f) => [f.path, f]));
  const actions: FileAction[] = [];
  for (const file of files) {
    const finalPath = artifactFile(dir, file.path);
    const known = priorByPath.get(file.path);
    const matches = known !== undefined && sameContent(known, file);
    if (matches && (await sizeOf(finalPath)) === file.bytes) {
      actions.push({ file, kind: "present", presentBytes: file.bytes });
      continue;
    }
    if (linkFromDir !== undefined) {
      const src = artifactFile(linkFromDir, file.path);
      if ((await sizeOf(src)) === file.bytes) {
        actions.push({ file, kind: "link", presentBytes: file.bytes, linkFrom: src });
        continue;
      }
    }
    const part = matches ? await keptPartialBytes(finalPath) : 0;
    if (part > 0 && part <= file.bytes) {
      actions.push({ file, kind: "resume", presentBytes: part });
    } else {
      actions.push({ file, kind: "fetch", presentBytes: 0 });
    }
  }
  const manifestBytes = files.reduce((s, f) => s + f.bytes, 0);
  const additionalBytes = actions.reduce((s, a) => s + (a.file.bytes - a.presentBytes), 0);
  return { actions, manifestBytes, additionalBytes };
}

/** How far a fill is, over all its files. */
export interface FillTotals {
  readonly doneBytes: number;
  readonly totalBytes: number;
  /** Files complete so far (present, linked or transferred). */
  readonly filesDone: number;
  readonly filesTotal: number;
}

/** What a plan finds already there before anything moves: present files and resumable partials. */
export function plannedTotals(plan: FillPlan): FillTotals {
  return {
    doneBytes: plan.actions.reduce((s, a) => s + (a.kind === "link" ? 0 : a.presentBytes), 0),
    totalBytes: plan.manifestBytes,
    filesDone: plan.actions.filter((a) => a.kind === "present").length,
    filesTotal: plan.actions.length,
  };
}

export interface FillProgress extends FillTotals {
  readonly file: string;
  readonly phase: "link" | "transfer";
  readonly fileDoneBytes: number;
  readonly fileBytes: number;
}

export interface FillStats {
  /** Bytes received (a piece that failed its hash counts too). */
  readonly fetchedBytes: number;
  /** Of those, bytes peers sent (piece transfers only). */
  readonly peerBytes: number;
  readonly resumedBytes: number;
  readonly linkedBytes: number;
  readonly reusedBytes: number;
  /** sha256 of every file, computed or verified during the fill (present and linked files: as listed). */
  readonly sha256: ReadonlyMap<string, string>;
}

/** Raised when a planned hardlink fails; the caller re-plans without links (admission must be redone). */
export class LinkFailedError extends Error {
  constructor(path: string, cause: unknown) {
    super(`cannot hardlink ${path} from the store`, { cause });
    this.name = "LinkFailedError";
  }
}

/** A file fetched piece by piece: the manifest's pieces, where they may come from, this copy's order. */
export interface PieceJob {
  readonly file: PieceFile;
  readonly sources: () => readonly PieceSource[];
  readonly seed: string;
  readonly peersKnown?: (() => boolean) | undefined;
}

/** What a copy in progress can serve of one file. */
export type ServableFile =
  | { readonly kind: "all" }
  | {
      readonly kind: "pieces";
      readonly set: PieceSet;
      /** Pieces being fetched from the store host now. */
      readonly fromStore: PieceSet;
      readonly pieceBytes: number;
      readonly part: string;
    };

/** What a fill runs: the plan, where each file's bytes come from, and what it reports as it goes. */
export interface FillArgs {
  readonly dir: string;
  readonly plan: FillPlan;
  readonly open: (file: RecordFile) => OpenAt;
  readonly signal: AbortSignal;
  readonly onProgress?: ((p: FillProgress) => void) | undefined;
  /** A file whose source sends nothing for this long fails, its partial kept (transfer.ts). */
  readonly idleTimeoutMs?: number | undefined;
  /**
   * A file with piece hashes, and where its pieces may come from: it is fetched piece by piece
   * (piece-fetch.ts) instead of whole from `open`.
   */
  readonly pieces?: ((file: RecordFile) => PieceJob | undefined) | undefined;
  /** Bytes received, by kind of source (a whole-file transfer's come from the store host). */
  readonly onReceived?: ((from: "store" | "peer", n: number) => void) | undefined;
  /** What of a file this copy holds verified now: a live piece set (and its partial) or all of it. */
  readonly onServable?: ((path: string, have: ServableFile) => void) | undefined;
}

/** Executes a plan; discards partials of files that must be fetched from scratch first. */
export async function executeFill(args: FillArgs): Promise<FillStats> {
  const t = new FillTally(args);
  for (const a of args.plan.actions) {
    const finalPath = artifactFile(args.dir, a.file.path);
    if (a.kind === "present") {
      t.reusedBytes += a.file.bytes;
      t.whole(a.file, a.file.sha256);
      continue;
    }
    if (a.kind === "link" && a.linkFrom) {
      await linkInto(finalPath, a.linkFrom, a.file.path);
      t.linkedBytes += a.file.bytes;
      t.done += a.file.bytes;
      t.filesDone++;
      t.report(a.file, "link");
      t.whole(a.file, a.file.sha256);
      continue;
    }
    if (a.kind === "fetch") {
      await rm(partFile(finalPath), { force: true });
      await rm(piecesFile(finalPath), { force: true });
    }
    await transferOne(args, t, { action: a, finalPath });
  }
  return t.stats();
}

/** The running counts of one fill, and its progress reports. */
class FillTally {
  done: number;
  filesDone: number;
  fetchedBytes = 0;
  peerBytes = 0;
  resumedBytes = 0;
  linkedBytes = 0;
  reusedBytes = 0;
  private readonly sha256 = new Map<string, string>();
  private readonly total: number;
  private readonly filesTotal: number;

  constructor(private readonly args: FillArgs) {
    const planned = plannedTotals(args.plan);
    this.done = planned.doneBytes;
    this.filesDone = planned.filesDone;
    this.total = planned.totalBytes;
    this.filesTotal = planned.filesTotal;
  }

  /** Progress on `file`: `fileDoneBytes` of it done (all of it when absent). */
  report(file: RecordFile, phase: FillProgress["phase"], fileDoneBytes?: number): void {
    this.args.onProgress?.({
      file: file.path,
      phase,
      fileDoneBytes: fileDoneBytes ?? file.bytes,
      fileBytes: file.bytes,
      doneBytes: this.done,
      totalBytes: this.total,
      filesDone: this.filesDone,
      filesTotal: this.filesTotal,
    });
  }

  /** A file is in place whole: its hash (when known), and every byte of it servable. */
  whole(file: RecordFile, sha256: string | undefined): void {
    if (sha256) this.sha256.set(file.path, sha256);
    this.args.onServable?.(file.path, { kind: "all" });
  }

  stats(): FillStats {
    const { fetchedBytes, peerBytes, resumedBytes, linkedBytes, reusedBytes, sha256 } = this;
    return { fetchedBytes, peerBytes, resumedBytes, linkedBytes, reusedBytes, sha256 };
  }
}

/** One file fetched or resumed: by pieces (store and peers) when it has piece hashes, else whole. */
async function transferOne(
  args: FillArgs,
  t: FillTally,
  { action: a, finalPath }: { readonly action: FileAction; readonly finalPath: string },
): Promise<void> {
  let fileDone = a.presentBytes;
  const onBytes = (n: number) => {
    fileDone += n;
    t.done += n;
    t.report(a.file, "transfer", fileDone);
  };
  const job = args.pieces?.(a.file);
  let out: {
    readonly fetchedBytes: number;
    readonly resumedBytes: number;
    readonly sha256: string;
  };
  if (job) {
    const pieces = await fetchPieces({
      finalPath,
      file: job.file,
      sources: job.sources,
      seed: job.seed,
      peersKnown: job.peersKnown,
      onReceived: args.onReceived,
      signal: args.signal,
      idleTimeoutMs: args.idleTimeoutMs ?? DEFAULT_TRANSFER_IDLE_MS,
      onBytes,
      onPieces: (set, part, fromStore) =>
        args.onServable?.(a.file.path, {
          kind: "pieces",
          set,
          fromStore,
          pieceBytes: job.file.pieces.bytes,
          part,
        }),
    });
    t.peerBytes += pieces.peerBytes;
    out = pieces;
  } else {
    // A whole-file transfer resumes a prefix, never a piece partial (its holes are not a prefix).
    await dropPiecePartial(finalPath);
    out = await transferFile({
      finalPath,
      file: {
        path: a.file.path,
        bytes: a.file.bytes,
        sha256: a.file.sha256,
        gitOid: a.file.git_oid,
      },
      open: args.open(a.file),
      signal: args.signal,
      idleTimeoutMs: args.idleTimeoutMs,
      onBytes: (n) => {
        args.onReceived?.("store", n);
        onBytes(n);
      },
    });
  }
  t.fetchedBytes += out.fetchedBytes;
  t.resumedBytes += out.resumedBytes;
  // Exact again if the partial was not what the plan saw (gone, or the source ignored the range).
  t.done += a.file.bytes - fileDone;
  t.filesDone++;
  t.report(a.file, "transfer");
  t.whole(a.file, out.sha256);
}

/**
 * A hardlink of `from` at `finalPath` (through a temporary name, so a failure leaves nothing half
 * made); a partial download there goes. Throws LinkFailedError (the caller copies instead).
 */
async function linkInto(finalPath: string, from: string, path: string): Promise<void> {
  await mkdir(dirname(finalPath), { recursive: true });
  const tmp = join(
    dirname(finalPath),
    `.${basename(finalPath)}.link-${randomBytes(4).toString("hex")}`,
  );
  try {
    await link(from, tmp);
    await rename(tmp, finalPath);
  } catch (e) {
    await rm(tmp, { force: true });
    throw new LinkFailedError(path, e);
  }
  await rm(partFile(finalPath), { force: true });
}

/** Removes files in `dir` that the manifest does not name (stale artifacts, stray partials, temps). */
export async function removeStale(
  dir: string,
  keep: readonly string[],
  keepNames: readonly string[],
): Promise<string[]> {
  const wanted = new Set(keep);
  const removed: string[] = [];
  for (const f of await walkFiles(dir)) {
    if (wanted.has(f.path) || keepNames.includes(f.path)) continue;
    await rm(join(dir, ...f.path.split("/")), { force: true });
    removed.push(f.path);
  }
  return removed;
}
