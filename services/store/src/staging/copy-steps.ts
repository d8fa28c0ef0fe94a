// The steps of one copy that do not depend on where it comes from: the failure a step answers, the
// fill (record first, then every file fetched, resumed, linked or reused and verified), the commit
// (hashes into the record, stale files removed, the record marked complete) and the report of it.
import { mkdir } from "node:fs/promises";
import type { Logger } from "@ic/log";
import type { ModelId, StoreManifest } from "@ic/protocol";
import type { StagedCopy } from "@ic/staging";
import {
  executeFill,
  removeStale,
  type FillPlan,
  type FillStats,
  type PieceJob,
  type ServableFile,
} from "../transfer/fill.ts";
import { RECORD_FILE, writeRecord, type RecordFile, type StagingRecord } from "../record.ts";
import { errText, TransferError, type OpenAt } from "../transfer/transfer.ts";
import type {
  DownloadFailed,
  DownloadFailedCause,
  StagedEntry,
  StagedModel,
  StageOptions,
} from "./staging-types.ts";

/** One copy the staging client makes, carried whole through its steps. */
export interface CopyJob {
  readonly modelId: ModelId;
  /** The request's models (the base and its companions): the capacity pass protects them. */
  readonly request: readonly ModelId[];
  readonly options: StageOptions;
  readonly signal: AbortSignal;
}

/** A copy from the store host. */
export interface StoreCopyJob extends CopyJob {
  readonly storeUrl: string;
  readonly manifest: StoreManifest;
  /** Files may be hardlinked from the store's directory (false once a link failed). */
  readonly allowLinks: boolean;
}

/** A stage that did not happen or did not finish, before the request's staged models are added. */
export type StepFailure = Omit<DownloadFailed, "staged">;

const RETRYABLE: Readonly<Record<DownloadFailedCause, boolean>> = {
  no_fit: true,
  store_unreachable: true,
  not_in_store: false,
  store_error: true,
  hub_error: true,
  transfer: true,
  integrity: true,
  aborted: true,
};

/** The failure of a step, logged once with its cause. */
export function downloadFailure(
  log: Logger,
  modelId: ModelId,
  cause: DownloadFailedCause,
  message: string,
): StepFailure {
  log.warn({ modelId, cause }, message);
  return {
    ok: false,
    type: "DownloadFailed",
    modelId,
    cause,
    message,
    retryable: RETRYABLE[cause],
  };
}

/** A transfer that threw: its kind when it is a TransferError (the partial is kept), else transfer. */
export function transferFailure(log: Logger, modelId: ModelId, e: unknown): StepFailure {
  if (e instanceof TransferError) {
    const cause: DownloadFailedCause = e.kind;
    const hint = e.kind === "integrity" ? "" : "; the partial is kept and the next attempt resumes";
    return downloadFailure(log, modelId, cause, `staging ${modelId} failed: ${e.message}${hint}`);
  }
  log.error({ modelId, err: e }, "staging failed unexpectedly");
  return downloadFailure(log, modelId, "transfer", `staging ${modelId} failed: ${errText(e)}`);
}

/**
 * The fill step of a copy (store or hub): the record (incomplete) first, so a crash leaves a copy
 * that resumes; then every file fetched, resumed, linked or reused and verified (executeFill).
 * commitCopy follows. The copy is still marked downloading meanwhile, so no eviction pass can
 * delete it while it is finalized.
 */
export async function fillCopy(step: {
  readonly dir: string;
  readonly record: StagingRecord;
  readonly plan: FillPlan;
  readonly open: (file: RecordFile) => OpenAt;
  readonly options: StageOptions;
  readonly signal: AbortSignal;
  readonly idleTimeoutMs: number | undefined;
  readonly pieces?: ((file: RecordFile) => PieceJob | undefined) | undefined;
  readonly onServable?: ((path: string, have: ServableFile) => void) | undefined;
  readonly onReceived?: ((from: "store" | "peer", n: number) => void) | undefined;
}): Promise<FillStats> {
  const { dir, record, options } = step;
  await mkdir(dir, { recursive: true });
  await writeRecord(dir, record);
  const modelId = record.model_id;
  return executeFill({
    idleTimeoutMs: step.idleTimeoutMs,
    dir,
    plan: step.plan,
    signal: step.signal,
    open: step.open,
    pieces: step.pieces,
    onServable: step.onServable,
    onReceived: step.onReceived,
    onProgress: options.onProgress && ((p) => options.onProgress?.({ modelId, ...p })),
  });
}

export function toCopy(e: StagedEntry): StagedCopy {
  return {
    modelId: e.modelId,
    bytes: e.bytes,
    freeableBytes: e.freeableBytes,
    lastUsedMs: e.lastUsedMs,
    inUse: e.inUse,
    companionOfActive: e.companionOfActive,
    downloading: e.downloading,
  };
}

export function statsLog(s: FillStats) {
  return {
    fetchedBytes: s.fetchedBytes,
    peerBytes: s.peerBytes,
    resumedBytes: s.resumedBytes,
    linkedBytes: s.linkedBytes,
    reusedBytes: s.reusedBytes,
  };
}

/**
 * Commit, last step of a copy: the files' verified hashes into the record, files the record does not
 * name removed, and the record marked complete (a copy without it is resumed, never served).
 */
export async function commitCopy(
  dir: string,
  record: StagingRecord,
  stats: FillStats,
  now: number,
): Promise<void> {
  const files = record.files.map((f) => ({ ...f, sha256: stats.sha256.get(f.path) ?? f.sha256 }));
  await removeStale(
    dir,
    files.map((f) => f.path),
    [RECORD_FILE],
  );
  await writeRecord(dir, {
    ...record,
    files,
    complete: true,
    last_used_ms: now,
    completed_at_ms: now,
  });
}

/** What a stage reports of a copy it made: where, from where, and how its bytes came. */
export function stagedModel({
  modelId,
  dir,
  source,
  plan,
  stats,
  evicted,
}: {
  readonly modelId: ModelId;
  readonly dir: string;
  readonly source: "store" | "hub";
  readonly plan: { readonly manifestBytes: number };
  readonly stats: FillStats;
  readonly evicted: readonly ModelId[];
}): StagedModel {
  return {
    modelId,
    path: dir,
    source,
    totalBytes: plan.manifestBytes,
    fetchedBytes: stats.fetchedBytes,
    peerBytes: stats.peerBytes,
    resumedBytes: stats.resumedBytes,
    // A hub download links nothing (its fill has no link source).
    linkedBytes: source === "hub" ? 0 : stats.linkedBytes,
    reusedBytes: stats.reusedBytes,
    evicted: [...evicted],
  };
}
