// The worker-side staging client: copies models from a store host into node_cache_path/<org>--<name>,
// runs every eviction pass through planEviction, and falls back to the model hub when the store is down.
//
// Invariants: one admission+transfer at a time (a FIFO); a transfer starts only after the capacity pass
// found room for the exact additional bytes plus the headroom; a copy is complete only when its record
// says so, and the record is written after every file was verified and renamed into place; deletion
// renames a directory away first, so a crash never leaves half a copy that looks complete.
import { randomBytes } from "node:crypto";
import { mkdir } from "node:fs/promises";
import type { Logger } from "@ic/log";
import { type Clock, type ModelId, type PeerPieces, type StorageReport } from "@ic/protocol";
import {
  noFitMessage,
  planEviction,
  type EvictionPlan,
  type EvictionTrigger,
  type NoFitMessageInput,
  Serial,
} from "@ic/staging";
import { nodeDisk, type Disk } from "../disk.ts";
import { LinkFailedError, planFill, type FillStats } from "../transfer/fill.ts";
import { isErrno, modelDir, removeDirAtomic } from "../paths.ts";
import {
  readRecord,
  RECORD_FILE,
  writeRecord,
  type RecordFile,
  type StagingRecord,
} from "../record.ts";
import { errText } from "../transfer/transfer.ts";
import {
  commitCopy,
  downloadFailure,
  stagedModel,
  statsLog,
  toCopy,
  transferFailure,
  type CopyJob,
  type StepFailure,
  type StoreCopyJob,
} from "./copy-steps.ts";
import { downloadFromHub } from "./hub-fallback.ts";
import { PeerServing } from "./peer-serving.ts";
import { fillFromStore, type StoreCopyContext } from "./store-copy.ts";
import { listStaged, removeLeftovers } from "./staged-dir.ts";
import { StoreAccess } from "./store-access.ts";
import { buildStorageReport } from "./storage-report.ts";
import type {
  EvictionOutcome,
  ModelUsage,
  PurgeOutcome,
  StagedEntry,
  StagedModel,
  StageOptions,
  StageResult,
  StagingClientOptions,
  StagingCounters,
} from "./staging-types.ts";

const NO_USAGE: ModelUsage = { live: new Set(), companions: new Set() };

export class StagingClient implements AsyncDisposable {
  private readonly log: Logger;
  private readonly disk: Disk;
  private readonly clock: Pick<Clock, "now">;
  private readonly store: StoreAccess;
  private readonly serial = new Serial();
  private readonly downloading = new Set<ModelId>();
  /** Deletions of staged copies under way (a transfer of the same model waits for them). */
  private readonly removing = new Map<ModelId, Promise<void>>();
  private readonly controllers = new Set<AbortController>();
  /** What of its copies this node serves to peers, those being filled included. */
  private readonly serving = new PeerServing({
    dir: (modelId) => this.modelPath(modelId),
    complete: (modelId) => this.completeRecord(modelId),
  });
  private readonly seed: string;
  /** Bytes received for staged copies, by source. */
  readonly counters: StagingCounters;
  private state: "idle" | "running" | "stopped" = "idle";

  constructor(private readonly opts: StagingClientOptions) {
    this.log = opts.logger.child({ component: "staging" });
    this.disk = opts.disk ?? nodeDisk;
    this.clock = opts.clock ?? { now: () => Date.now() };
    this.store = new StoreAccess(opts);
    this.seed = opts.nodeName ?? randomBytes(8).toString("hex");
    this.counters = opts.counters ?? { from_store_bytes: 0, from_peers_bytes: 0 };
  }

  get root(): string {
    return this.opts.root;
  }

  /** Creates the root, removes leftovers of a crashed session and runs the startup recency pass. */
  async start(): Promise<EvictionOutcome> {
    if (this.state === "stopped") throw new Error("staging client was stopped");
    this.state = "running";
    await mkdir(this.opts.root, { recursive: true });
    const leftovers = await removeLeftovers(this.opts.root);
    if (leftovers > 0) this.log.info({ leftovers }, "removed leftovers of an interrupted session");
    return this.runPass("startup");
  }

  /** Aborts running transfers (their partials stay for resume) and waits for them to settle. */
  async stop(): Promise<void> {
    if (this.state === "stopped") return;
    this.state = "stopped";
    for (const c of this.controllers) c.abort(new Error("staging client stopping"));
    await this.serial.run(async () => undefined);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  /** Directory the engine loads a staged model from. */
  modelPath(modelId: ModelId): string {
    return modelDir(this.opts.root, modelId);
  }

  /**
   * Stages a model and its companions, one admission+transfer at a time. Never throws for transfer
   * problems: they come back as a DownloadFailed result.
   */
  async stage(modelId: ModelId, options: StageOptions = {}): Promise<StageResult> {
    const ids = [modelId, ...(options.companions ?? []).filter((c) => c !== modelId)];
    const done: StagedModel[] = [];
    for (const id of ids) {
      // The served file names the base model's quantization; a companion takes its own default.
      const o = id === modelId ? options : { ...options, servedFile: undefined };
      const r = await this.serial.run(() => this.stageOne(id, ids, o));
      if (!r.ok) return { ...r, staged: done };
      done.push(r.model);
    }
    return { ok: true, models: done };
  }

  /** Records a use of the model now (runner start, request served); orders recency eviction. */
  async touch(modelId: ModelId): Promise<void> {
    // A running transfer stamps the time itself when it completes.
    if (this.downloading.has(modelId)) return;
    const dir = this.modelPath(modelId);
    const r = await readRecord(dir, modelId);
    if (r.kind !== "ok") return;
    try {
      await writeRecord(dir, { ...r.record, last_used_ms: this.clock.now() }, RECORD_FILE, false);
    } catch (e) {
      // Deleted by a pass meanwhile: nothing to stamp.
      if (!isErrno(e, "ENOENT")) throw e;
    }
  }

  /** Instance deactivation: stamps the models' last use, then runs the deactivation pass. */
  async deactivated(modelIds: readonly ModelId[]): Promise<EvictionOutcome> {
    for (const id of modelIds) await this.touch(id);
    return this.runPass("deactivation");
  }

  /** POST /store/purge-staging on this node: deletes every idle copy, or only the named model's. */
  async purge(modelId?: ModelId): Promise<PurgeOutcome> {
    const out = await this.runPass("purge", modelId);
    const busy = out.plan.kept.filter(
      (k) =>
        k.reason === "in_use" || k.reason === "companion_of_active" || k.reason === "downloading",
    );
    return {
      deleted: out.deleted,
      freed_bytes: out.freed_bytes,
      skipped_in_use: busy.map((k) => k.modelId),
    };
  }

  /** Every model directory under the staging root, with sizes, last use and usage flags. */
  async list(): Promise<StagedEntry[]> {
    return listStaged(this.opts.root, (this.opts.usage ?? (() => NO_USAGE))(), this.downloading);
  }

  /** True when a complete, verified copy is staged. */
  async isStaged(modelId: ModelId): Promise<boolean> {
    return (await this.list()).some((e) => e.modelId === modelId && e.complete);
  }

  /** GET /store/storage: staged models, event-log usage (from the caller) and models-volume space. */
  async storageReport(input: { eventLogBytes: number }): Promise<StorageReport> {
    const [entries, space] = await Promise.all([this.list(), this.disk.space(this.opts.root)]);
    return buildStorageReport({
      nodeCachePath: this.opts.root,
      entries,
      eventLogBytes: input.eventLogBytes,
      volume: space,
      settings: this.opts.settings,
      nowMs: this.clock.now(),
    });
  }

  // ---- serving peers ----

  /** GET /store/staged/{org}/{name}/pieces: what of the model this node can serve to peers now. */
  peerPieces(modelId: ModelId): Promise<PeerPieces | null> {
    return this.serving.pieces(modelId);
  }

  /** GET /store/staged/{org}/{name}/files/{path} with a range: the file to read it from. */
  peerFile(modelId: ModelId, path: string, span: { readonly start: number; readonly end: number }) {
    return this.serving.file(modelId, path, span);
  }

  private async completeRecord(modelId: ModelId): Promise<StagingRecord | null> {
    if (this.downloading.has(modelId) || this.removing.has(modelId)) return null;
    const r = await readRecord(this.modelPath(modelId), modelId);
    return r.kind === "ok" && r.record.complete ? r.record : null;
  }

  // ---- passes ----

  private async runPass(
    trigger: EvictionTrigger,
    purgeModelId?: ModelId,
  ): Promise<EvictionOutcome> {
    const entries = await this.list();
    const plan = planEviction({
      trigger,
      staged: entries.map(toCopy),
      keepRecentBytes: this.opts.settings.keepRecentBytes,
      cleanupOnDeactivate: this.opts.settings.cleanupOnDeactivate,
      purgeModelId,
    });
    return this.apply(plan);
  }

  private async apply(plan: EvictionPlan): Promise<EvictionOutcome> {
    const deleted: ModelId[] = [];
    const failed: { modelId: ModelId; error: string }[] = [];
    let freed = 0;
    for (const item of plan.items) {
      // A transfer may have started since the plan was made; never delete under it. The check
      // and the mark below happen in one turn: a transfer starting later waits for the deletion.
      if (this.downloading.has(item.modelId)) continue;
      const removal = removeDirAtomic(this.opts.root, this.modelPath(item.modelId));
      const settled = removal.catch(() => {});
      this.removing.set(item.modelId, settled);
      void settled.then(() => {
        if (this.removing.get(item.modelId) === settled) this.removing.delete(item.modelId);
      });
      try {
        await removal;
        deleted.push(item.modelId);
        freed += item.freeableBytes;
        this.log.info(
          { modelId: item.modelId, reason: item.reason, bytes: item.bytes, trigger: plan.trigger },
          "deleted staged copy",
        );
      } catch (e) {
        failed.push({ modelId: item.modelId, error: errText(e) });
        this.log.error({ modelId: item.modelId, err: e }, "could not delete staged copy");
      }
    }
    return { plan, deleted, freed_bytes: freed, failed };
  }

  // ---- one transfer ----

  private async stageOne(
    modelId: ModelId,
    request: readonly ModelId[],
    options: StageOptions,
  ): Promise<{ ok: true; model: StagedModel } | StepFailure> {
    // Staging works before start() too (the root is created on demand); only stop() refuses.
    if (this.state === "stopped") {
      return downloadFailure(this.log, modelId, "aborted", "staging client is stopped");
    }
    const storeUrl = options.storeUrl ?? this.opts.storeUrl;
    const controller = new AbortController();
    const onAbort = () => controller.abort(options.signal?.reason);
    if (options.signal?.aborted) onAbort();
    options.signal?.addEventListener("abort", onAbort, { once: true });
    this.controllers.add(controller);
    const job: CopyJob = { modelId, request, options, signal: controller.signal };
    try {
      if (!storeUrl) {
        if (this.opts.hub) return await this.fromHub(job);
        return downloadFailure(
          this.log,
          modelId,
          "store_unreachable",
          "no store URL and no model hub configured",
        );
      }
      const m = await this.store.fetchManifest(storeUrl, modelId, controller.signal);
      if (m.kind === "unreachable" && this.opts.hub) {
        this.log.warn(
          { modelId, reason: m.message },
          "store unreachable; direct model-hub download",
        );
        return await this.fromHub(job);
      }
      if (m.kind !== "ok") {
        const cause = m.kind === "unreachable" ? "store_unreachable" : m.kind;
        return downloadFailure(this.log, modelId, cause, m.message);
      }
      return await this.fromStore({ ...job, storeUrl, manifest: m.manifest, allowLinks: true });
    } finally {
      options.signal?.removeEventListener("abort", onAbort);
      this.controllers.delete(controller);
    }
  }

  /**
   * The model is marked downloading before its directory is read, so no eviction pass starts
   * deleting it from here on; a deletion already under way is waited for (a pass runs outside the
   * transfer queue, and deleting a directory while a transfer fills it lost the transfer's files).
   */
  private async fromStore(
    job: StoreCopyJob,
  ): Promise<{ ok: true; model: StagedModel } | StepFailure> {
    this.downloading.add(job.modelId);
    try {
      await this.removing.get(job.modelId);
      return await this.copyFromStore(job);
    } finally {
      this.downloading.delete(job.modelId);
    }
  }

  /**
   * Rule 6, the admission step of staging from the store: the capacity pass for the exact additional
   * bytes, with the request's models protected, and the evictions it plans. A copy that cannot fit,
   * or whose evictions failed, is refused with the arithmetic.
   */
  private async admit(
    modelId: ModelId,
    plan: { readonly manifestBytes: number; readonly additionalBytes: number },
    request: readonly ModelId[],
  ): Promise<
    | { ok: true; space: { freeBytes: number }; applied: EvictionOutcome }
    | { ok: false; failure: StepFailure }
  > {
    const entries = await this.list();
    const space = await this.disk.space(this.opts.root);
    const evict = planEviction({
      trigger: "capacity",
      staged: entries.map(toCopy),
      keepRecentBytes: this.opts.settings.keepRecentBytes,
      cleanupOnDeactivate: this.opts.settings.cleanupOnDeactivate,
      capacity: {
        requiredBytes: plan.additionalBytes,
        freeBytes: space.freeBytes,
        headroomBytes: this.opts.settings.headroomBytes,
        protectedIds: request,
      },
    });
    const refuse = (freeBytes: number, reclaimableBytes: number) => {
      const arithmetic: NoFitMessageInput = {
        modelId,
        path: this.opts.root,
        manifestBytes: plan.manifestBytes,
        requiredBytes: plan.additionalBytes,
        headroomBytes: this.opts.settings.headroomBytes,
        freeBytes,
        reclaimableBytes,
      };
      return {
        ok: false as const,
        failure: {
          ...downloadFailure(this.log, modelId, "no_fit", noFitMessage(arithmetic)),
          arithmetic,
        },
      };
    };
    if (!evict.fits) return refuse(space.freeBytes, evict.capacity?.reclaimableBytes ?? 0);
    const applied = await this.apply(evict);
    if (applied.failed.length > 0) return refuse(space.freeBytes + applied.freed_bytes, 0);
    return { ok: true, space, applied };
  }

  /**
   * A copy from the store: planned against what is there (hardlinks from the store's directory when
   * it shares the filesystem), admitted (rule 6), filled from the store and peers (store-copy.ts),
   * committed. A hardlink that fails sends the job through again as a plain copy.
   */
  private async copyFromStore(
    job: StoreCopyJob,
  ): Promise<{ ok: true; model: StagedModel } | StepFailure> {
    const { modelId, manifest } = job;
    await mkdir(this.opts.root, { recursive: true });
    const dir = this.modelPath(modelId);
    const prior = await readRecord(dir, modelId);
    const priorRecord =
      prior.kind === "ok" && prior.record.source === "store" ? prior.record : null;
    const files: RecordFile[] = manifest.files.map((f) => ({
      path: f.path,
      bytes: f.bytes,
      sha256: f.sha256,
    }));
    const linkFrom = job.allowLinks ? await this.linkSource(modelId) : undefined;
    const plan = await planFill(dir, files, priorRecord, linkFrom);
    const admitted = await this.admit(modelId, plan, job.request);
    if (!admitted.ok) return admitted.failure;
    const { space, applied } = admitted;
    const record: StagingRecord = {
      version: 1,
      model_id: modelId,
      source: "store",
      files,
      total_bytes: plan.manifestBytes,
      complete: false,
      last_used_ms: priorRecord?.last_used_ms ?? this.clock.now(),
    };
    this.log.info(
      {
        modelId,
        manifestBytes: plan.manifestBytes,
        additionalBytes: plan.additionalBytes,
        freeBytes: space.freeBytes,
        evicted: applied.deleted,
      },
      "staging admitted",
    );
    let stats: FillStats;
    try {
      stats = await fillFromStore(this.storeCopyContext(), job, { dir, record, plan });
      await commitCopy(dir, record, stats, this.clock.now());
    } catch (e) {
      if (e instanceof LinkFailedError) {
        this.log.warn({ modelId, err: e }, "hardlink failed; admitting again as a copy");
        return await this.copyFromStore({ ...job, allowLinks: false });
      }
      return transferFailure(this.log, modelId, e);
    }
    this.log.info({ modelId, ...statsLog(stats) }, "staged");
    const evicted = applied.deleted;
    return {
      ok: true,
      model: stagedModel({ modelId, dir, source: "store", plan, stats, evicted }),
    };
  }

  /** What a store copy's fill reads and counts of this client. */
  private storeCopyContext(): StoreCopyContext {
    return {
      log: this.log,
      store: this.store,
      peers: this.opts.peers,
      seed: this.seed,
      counters: this.counters,
      serving: this.serving,
      idleTimeoutMs: this.opts.transferIdleTimeoutMs,
    };
  }

  /** Rule 8: the direct hub download (hub-fallback.ts); without a hub, the store stays the cause. */
  private async fromHub(job: CopyJob): Promise<{ ok: true; model: StagedModel } | StepFailure> {
    const hub = this.opts.hub;
    if (!hub)
      return downloadFailure(this.log, job.modelId, "store_unreachable", "no model hub configured");
    const ctx = {
      hub,
      log: this.log,
      disk: this.disk,
      clock: this.clock,
      settings: this.opts.settings,
      idleTimeoutMs: this.opts.transferIdleTimeoutMs,
    };
    return downloadFromHub(ctx, job);
  }

  /** The store's model directory when it is on the staging filesystem, so files can be hardlinked. */
  private async linkSource(modelId: ModelId): Promise<string | undefined> {
    const storePath = this.opts.storeLocalPath;
    if (!storePath) return undefined;
    const dir = modelDir(storePath, modelId);
    try {
      return (await this.disk.sameFilesystem(dir, this.opts.root)) ? dir : undefined;
    } catch (e) {
      if (isErrno(e, "ENOENT")) return undefined;
      throw e;
    }
  }
}
