// A copy from the model hub: the steps both roles share. The listing at a revision (resolved to its
// commit), the files serving needs (hub-select.ts), the fill's plan against what is already there,
// the exact room for it with the headroom, the copy's record (hubCopyRecord), and the opener that
// reads every file at the listed commit, so a moving branch cannot mix two versions. The store
// host's pull (store-host/store-host.ts) and a node's direct fallback (staging/hub-fallback.ts) run
// them; the fill and the commit stay with each role.
import type { ModelId } from "@ic/protocol";
import { noFitMessage, type NoFitMessageInput } from "@ic/staging";
import type { Disk } from "../disk.ts";
import { hubRecordFile, type RecordFile, type StagingRecord } from "../record.ts";
import { planFill, type FillPlan } from "./fill.ts";
import type { HubListing, HubSource } from "./hub.ts";
import { selectHubFiles, type SelectAsk } from "./hub-select.ts";
import { errText, type OpenAt } from "./transfer.ts";

/** What a hub copy asks: which model, at which revision, which files, into where. */
export interface HubCopyRequest {
  readonly hub: HubSource;
  readonly modelId: ModelId;
  /** A branch, tag or commit; the hub source's default when absent. */
  readonly revision?: string | undefined;
  readonly select: SelectAsk;
  /** The copy's directory. */
  readonly dir: string;
  /** The volume it must fit on, with `headroomBytes` left free after it. */
  readonly volume: { readonly path: string; readonly disk: Disk; readonly headroomBytes: number };
  /** What is already there of the files the copy wants (a record of an earlier copy). */
  readonly prior: (files: readonly RecordFile[]) => Promise<StagingRecord | null>;
  readonly signal: AbortSignal;
  /** What was chosen, once the hub listed the repo (before any byte is fetched). */
  readonly onSelected?:
    ((s: { quant: string | null; servedFile: string | null }) => void) | undefined;
}

/** Why a hub copy could not start. */
export type HubCopyCause = "hub_error" | "no_fit" | "aborted";

export type HubCopyPlan =
  | {
      readonly ok: true;
      readonly listing: HubListing;
      readonly files: RecordFile[];
      readonly prior: StagingRecord | null;
      readonly plan: FillPlan;
    }
  | {
      readonly ok: false;
      readonly cause: HubCopyCause;
      readonly message: string;
      readonly arithmetic?: NoFitMessageInput;
    };

/** Plan, first step of a hub copy: listed, selected, planned against what is there, and fitting. */
export async function planHubCopy(r: HubCopyRequest): Promise<HubCopyPlan> {
  const { modelId, signal } = r;
  const failed = (cause: HubCopyCause, message: string) => ({ ok: false as const, cause, message });
  let listing;
  try {
    listing = await r.hub.list(modelId, signal, r.revision);
  } catch (e) {
    if (signal.aborted) return failed("aborted", `download of ${modelId} aborted`);
    const at = r.revision ? ` at ${r.revision}` : "";
    return failed("hub_error", `cannot list ${modelId}${at} on the model hub: ${errText(e)}`);
  }
  if (listing.files.length === 0)
    return failed("hub_error", `${modelId} has no artifact files on the model hub`);
  // Only what serving needs: one quantization (its split parts), a projector, the metadata.
  const selection = selectHubFiles(listing.files, r.select);
  if (!selection.ok) return failed("hub_error", `${modelId}: ${selection.message}`);
  r.onSelected?.({ quant: selection.quant, servedFile: selection.servedFile });
  const files = selection.files.map(hubRecordFile);
  const prior = await r.prior(files);
  const plan = await planFill(r.dir, files, prior);
  const { path, disk, headroomBytes } = r.volume;
  const space = await disk.space(path);
  if (space.freeBytes < plan.additionalBytes + headroomBytes) {
    const arithmetic: NoFitMessageInput = {
      modelId,
      path,
      manifestBytes: plan.manifestBytes,
      requiredBytes: plan.additionalBytes,
      headroomBytes,
      freeBytes: space.freeBytes,
      reclaimableBytes: 0,
    };
    return { ...failed("no_fit", noFitMessage(arithmetic)), arithmetic };
  }
  return { ok: true, listing, files, prior, plan };
}

/** The record of a hub copy that is starting: incomplete until its commit. */
export function hubCopyRecord(
  modelId: ModelId,
  planned: Extract<HubCopyPlan, { ok: true }>,
  lastUsedMs: number,
): StagingRecord {
  return {
    version: 1,
    model_id: modelId,
    source: "hub",
    revision: planned.listing.revision,
    files: planned.files,
    total_bytes: planned.plan.manifestBytes,
    complete: false,
    last_used_ms: lastUsedMs,
  };
}

/** Opens each file of a hub copy at the listed commit (with the hub's own description of it). */
export function hubOpener(
  hub: HubSource,
  modelId: ModelId,
  listing: HubListing,
): (file: RecordFile) => OpenAt {
  const byPath = new Map(listing.files.map((f) => [f.path, f]));
  return (file) => (offset, signal) =>
    hub.open(modelId, byPath.get(file.path) ?? file, {
      offset,
      signal,
      revision: listing.revision,
    });
}
