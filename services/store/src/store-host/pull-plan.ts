// What a pull (a hub copy into the store, planned by transfer/hub-download.ts) answers and starts
// from: its result, how it fails, and what is already in the store (an interrupted pull's record or
// the registered manifest). The store host runs the plan, the fill and the commit.
import { createReadStream } from "node:fs";
import { createHash } from "node:crypto";
import type { Logger } from "@ic/log";
import type { ModelId, StoreManifest } from "@ic/protocol";
import type { NoFitMessageInput } from "@ic/staging";
import type { FillTotals } from "../transfer/fill.ts";
import { artifactFile } from "../paths.ts";
import { readRecord, type RecordFile, type StagingRecord } from "../record.ts";

/** Progress record of a store-side hub download, removed once the manifest is written. */
export const DOWNLOAD_RECORD_FILE = ".ic-download.json";

export type HubDownloadResult =
  | {
      readonly ok: true;
      readonly manifest: StoreManifest;
      readonly fetchedBytes: number;
      readonly resumedBytes: number;
      readonly reusedBytes: number;
    }
  | {
      readonly ok: false;
      readonly type: "DownloadFailed";
      readonly modelId: ModelId;
      readonly cause: "no_fit" | "hub_error" | "transfer" | "integrity" | "aborted";
      readonly message: string;
      readonly arithmetic?: NoFitMessageInput;
    };

export interface HubDownloadOptions {
  readonly signal?: AbortSignal | undefined;
  /** Bytes and files done of the selected manifest: once admitted, then as files move. */
  readonly onProgress?: ((p: FillTotals) => void) | undefined;
  /** A branch, tag or commit; the hub source's default (main) when absent. */
  readonly revision?: string | undefined;
  /** The quantization to fetch (see hub-select.ts); Q4_K_M, else the smallest, when absent. */
  readonly quant?: string | undefined;
  /** What was chosen, once the hub listed the repo (before any byte is fetched). */
  readonly onSelected?:
    ((s: { quant: string | null; servedFile: string | null }) => void) | undefined;
}

/** Why a pull failed (the DownloadFailed event's cause). */
export type HubFailureCause = Extract<HubDownloadResult, { ok: false }>["cause"];

/** How a pull of `modelId` fails: logged once with its cause, answered as a DownloadFailed. */
export function pullFailure(log: Logger, modelId: ModelId) {
  return (
    cause: HubFailureCause,
    message: string,
    arithmetic?: NoFitMessageInput,
  ): HubDownloadResult => {
    log.warn({ modelId, cause }, message);
    return {
      ok: false,
      type: "DownloadFailed",
      modelId,
      cause,
      message,
      ...(arithmetic ? { arithmetic } : {}),
    };
  };
}

/**
 * What is already in the store for a download: an interrupted download's record, or the registered
 * manifest. Small files the hub identifies only by git blob id get that id computed from disk.
 */
export async function priorForDownload(
  manifest: StoreManifest | undefined,
  modelId: ModelId,
  dir: string,
  wanted: readonly RecordFile[],
): Promise<StagingRecord | null> {
  const rec = await readRecord(dir, modelId, DOWNLOAD_RECORD_FILE);
  if (rec.kind === "ok") return rec.record;
  if (!manifest) return null;
  const byPath = new Map(wanted.map((f) => [f.path, f]));
  const files: RecordFile[] = [];
  for (const f of manifest.files) {
    const hubFile = byPath.get(f.path);
    let gitOid: string | undefined;
    if (
      hubFile?.git_oid &&
      !hubFile.sha256 &&
      hubFile.bytes === f.bytes &&
      f.bytes <= GIT_OID_MAX_BYTES
    ) {
      gitOid = await gitBlobOid(artifactFile(dir, f.path), f.bytes);
    }
    files.push({
      path: f.path,
      bytes: f.bytes,
      sha256: f.sha256,
      ...(gitOid ? { git_oid: gitOid } : {}),
    });
  }
  return {
    version: 1,
    model_id: modelId,
    source: "hub",
    files,
    total_bytes: manifest.total_bytes,
    complete: true,
    last_used_ms: 0,
  };
}

/** Files stored in git itself (not LFS) are small; larger ones are never hashed twice. */
const GIT_OID_MAX_BYTES = 64 * 1024 * 1024;

async function gitBlobOid(path: string, bytes: number): Promise<string | undefined> {
  try {
    const hash = createHash("sha1").update(`blob ${bytes}\0`);
    for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
    return hash.digest("hex");
  } catch {
    return undefined;
  }
}
