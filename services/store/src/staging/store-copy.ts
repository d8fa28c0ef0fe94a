// The fill of a copy from the store host (a StoreCopyJob, admitted): every file from the store, and
// the pieces of files with piece hashes also from peers that hold them (peer-swarm.ts), what it has
// verified served to peers meanwhile (peer-serving.ts), the bytes counted by where they came from.
// The plan, the admission and the commit are the staging client's.
import type { Logger } from "@ic/log";
import type { FillPlan, FillStats } from "../transfer/fill.ts";
import type { RecordFile, StagingRecord } from "../record.ts";
import { fillCopy, type StoreCopyJob } from "./copy-steps.ts";
import type { PeerServing } from "./peer-serving.ts";
import { PeerSwarm, type PeerEndpoint } from "./peer-swarm.ts";
import type { StagingCounters } from "./staging-types.ts";
import type { StoreAccess } from "./store-access.ts";

/** What a store copy's fill reads and counts of the staging client. */
export interface StoreCopyContext {
  readonly log: Logger;
  readonly store: StoreAccess;
  /** Live peers to fetch pieces from; absent: the store alone. */
  readonly peers: (() => readonly PeerEndpoint[]) | undefined;
  /** This node's seed for the order it asks peers in. */
  readonly seed: string;
  readonly counters: StagingCounters;
  readonly serving: PeerServing;
  readonly idleTimeoutMs: number | undefined;
}

/** The admitted copy: where it goes, its record (incomplete) and the fill's plan. */
export interface AdmittedCopy {
  readonly dir: string;
  readonly record: StagingRecord;
  readonly plan: FillPlan;
}

export async function fillFromStore(
  ctx: StoreCopyContext,
  job: StoreCopyJob,
  copy: AdmittedCopy,
): Promise<FillStats> {
  const { modelId, manifest, storeUrl } = job;
  const swarm = new PeerSwarm({
    modelId,
    manifest,
    storeUrl,
    access: ctx.store,
    peers: ctx.peers ?? (() => []),
    log: ctx.log,
  });
  const have = ctx.serving.begin(modelId, copy.record.files);
  try {
    if (ctx.peers) await swarm.start(job.signal);
    return await fillCopy({
      ...copy,
      open: (file) => ctx.store.opener(storeUrl, modelId, file),
      pieces: (file: RecordFile) => {
        const m = manifest.files.find((f) => f.path === file.path);
        if (!m?.pieces) return undefined;
        return {
          file: { path: m.path, bytes: m.bytes, sha256: m.sha256, pieces: m.pieces },
          sources: () => swarm.sources(),
          peersKnown: () => (ctx.peers?.().length ?? 0) > 0,
          seed: `${ctx.seed}/${modelId}/${m.path}`,
        };
      },
      onServable: (path, h) => have.set(path, h),
      onReceived: (from, n) => {
        if (from === "peer") ctx.counters.from_peers_bytes += n;
        else ctx.counters.from_store_bytes += n;
      },
      options: job.options,
      signal: job.signal,
      idleTimeoutMs: ctx.idleTimeoutMs,
    });
  } finally {
    await swarm.stop();
    ctx.serving.end(modelId);
  }
}
