// Rule 8: a direct model-hub download into the node's model cache, when the store is unreachable
// or none is configured. The exact space check runs against the model cache's filesystem; nothing
// is evicted and the staging root plays no part. Steps: the listing (fetch), the fill, the commit.
import { mkdir } from "node:fs/promises";
import type { Logger } from "@ic/log";
import type { Clock, ModelId } from "@ic/protocol";
import { noFitMessage, type NoFitMessageInput, type StagingSettings } from "@ic/staging";
import type { Disk } from "../disk.ts";
import { selectHubFiles } from "../hub/hub-select.ts";
import { modelDir } from "../paths.ts";
import { hubRecordFile, readRecord, type StagingRecord } from "../record.ts";
import { planFill, type FillStats } from "../transfer/fill.ts";
import { errText } from "../transfer/transfer.ts";
import {
  commitCopy,
  downloadFailure,
  fillCopy,
  stagedModel,
  statsLog,
  transferFailure,
  type StepFailure,
} from "./copy-steps.ts";
import type { HubFallback, StagedModel, StageOptions } from "./staging-types.ts";

/** What a hub download needs of the staging client. */
export interface HubDownloadContext {
  readonly hub: HubFallback;
  readonly log: Logger;
  readonly disk: Disk;
  readonly clock: Pick<Clock, "now">;
  readonly settings: StagingSettings;
  readonly idleTimeoutMs: number | undefined;
}

export async function downloadFromHub(
  ctx: HubDownloadContext,
  modelId: ModelId,
  options: StageOptions,
  signal: AbortSignal,
): Promise<{ ok: true; model: StagedModel } | StepFailure> {
  const { hub, log } = ctx;
  const listed = await hubListing(ctx, modelId, options, signal);
  if (!listed.ok) return listed.failure;
  const { listing, selection } = listed;
  await mkdir(hub.modelCachePath, { recursive: true });
  const dir = modelDir(hub.modelCachePath, modelId);
  const prior = await readRecord(dir, modelId);
  const priorRecord = prior.kind === "ok" ? prior.record : null;
  const files = selection.files.map(hubRecordFile);
  const plan = await planFill(dir, files, priorRecord);
  const space = await ctx.disk.space(hub.modelCachePath);
  if (space.freeBytes < plan.additionalBytes + ctx.settings.headroomBytes) {
    const arithmetic: NoFitMessageInput = {
      modelId,
      path: hub.modelCachePath,
      manifestBytes: plan.manifestBytes,
      requiredBytes: plan.additionalBytes,
      headroomBytes: ctx.settings.headroomBytes,
      freeBytes: space.freeBytes,
      reclaimableBytes: 0,
    };
    return { ...downloadFailure(log, modelId, "no_fit", noFitMessage(arithmetic)), arithmetic };
  }
  const record: StagingRecord = {
    version: 1,
    model_id: modelId,
    source: "hub",
    revision: listing.revision,
    files,
    total_bytes: plan.manifestBytes,
    complete: false,
    last_used_ms: priorRecord?.last_used_ms ?? ctx.clock.now(),
  };
  let stats: FillStats;
  try {
    const byPath = new Map(listing.files.map((f) => [f.path, f]));
    stats = await fillCopy({
      dir,
      record,
      plan,
      // At the commit the listing named, so a moving branch cannot mix two versions.
      open: (file) => (offset, sig) =>
        hub.source.open(modelId, byPath.get(file.path) ?? file, offset, sig, listing.revision),
      options,
      signal,
      idleTimeoutMs: ctx.idleTimeoutMs,
    });
  } catch (e) {
    return transferFailure(log, modelId, e);
  }
  await commitCopy(dir, record, stats, ctx.clock.now());
  log.info({ modelId, path: dir, ...statsLog(stats) }, "downloaded from the model hub");
  return { ok: true, model: stagedModel(modelId, dir, "hub", plan, stats, []) };
}

/** Fetch, first step of a hub download: the model's listing and the files to take from it. */
async function hubListing(
  ctx: HubDownloadContext,
  modelId: ModelId,
  options: StageOptions,
  signal: AbortSignal,
) {
  const fail = (cause: "hub_error", message: string) => ({
    ok: false as const,
    failure: downloadFailure(ctx.log, modelId, cause, message),
  });
  let listing;
  try {
    listing = await ctx.hub.source.list(modelId, signal);
  } catch (e) {
    return fail("hub_error", `cannot list ${modelId} on the model hub: ${errText(e)}`);
  }
  if (listing.files.length === 0) {
    return fail("hub_error", `${modelId} has no artifact files on the model hub`);
  }
  const selection = selectHubFiles(listing.files, { file: options.servedFile });
  if (!selection.ok) return fail("hub_error", `${modelId}: ${selection.message}`);
  return { ok: true as const, listing, selection };
}
