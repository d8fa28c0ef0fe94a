// Rule 8: a direct model-hub download into the node's model cache, when the store is unreachable
// or none is configured. The exact space check runs against the model cache's filesystem; nothing
// is evicted and the staging root plays no part. Steps: the plan (transfer/hub-download.ts), the
// fill, the commit.
import { mkdir } from "node:fs/promises";
import type { Logger } from "@ic/log";
import type { Clock } from "@ic/protocol";
import type { StagingSettings } from "@ic/staging";
import type { Disk } from "../disk.ts";
import { modelDir } from "../paths.ts";
import { readRecord } from "../record.ts";
import type { FillStats } from "../transfer/fill.ts";
import { hubCopyRecord, hubOpener, planHubCopy } from "../transfer/hub-download.ts";
import {
  commitCopy,
  downloadFailure,
  fillCopy,
  stagedModel,
  statsLog,
  transferFailure,
  type CopyJob,
  type StepFailure,
} from "./copy-steps.ts";
import type { HubFallback, StagedModel } from "./staging-types.ts";

/** What a hub download needs of the staging client. */
export interface HubFallbackContext {
  readonly hub: HubFallback;
  readonly log: Logger;
  readonly disk: Disk;
  readonly clock: Pick<Clock, "now">;
  readonly settings: StagingSettings;
  readonly idleTimeoutMs: number | undefined;
}

export async function downloadFromHub(
  ctx: HubFallbackContext,
  job: CopyJob,
): Promise<{ ok: true; model: StagedModel } | StepFailure> {
  const { hub, log } = ctx;
  const { modelId, options, signal } = job;
  await mkdir(hub.modelCachePath, { recursive: true });
  const dir = modelDir(hub.modelCachePath, modelId);
  const planned = await planHubCopy({
    hub: hub.source,
    modelId,
    select: { file: options.servedFile },
    dir,
    volume: { path: hub.modelCachePath, disk: ctx.disk, headroomBytes: ctx.settings.headroomBytes },
    prior: async () => {
      const r = await readRecord(dir, modelId);
      return r.kind === "ok" ? r.record : null;
    },
    signal,
  });
  if (!planned.ok) {
    const failure = downloadFailure(log, modelId, planned.cause, planned.message);
    return planned.arithmetic ? { ...failure, arithmetic: planned.arithmetic } : failure;
  }
  const { plan } = planned;
  const record = hubCopyRecord(modelId, planned, planned.prior?.last_used_ms ?? ctx.clock.now());
  let stats: FillStats;
  try {
    stats = await fillCopy({
      dir,
      record,
      plan,
      open: hubOpener(hub.source, modelId, planned.listing),
      options,
      signal,
      idleTimeoutMs: ctx.idleTimeoutMs,
    });
  } catch (e) {
    return transferFailure(log, modelId, e);
  }
  await commitCopy(dir, record, stats, ctx.clock.now());
  log.info({ modelId, path: dir, ...statsLog(stats) }, "downloaded from the model hub");
  return {
    ok: true,
    model: stagedModel({ modelId, dir, source: "hub", plan, stats, evicted: [] }),
  };
}
