// The worker-side staging client: copies models from a store host into node_cache_path/<org>--<name>,
// runs every eviction pass through planEviction, and falls back to the model hub when the store is down.
//
// Invariants: one admission+transfer at a time (a FIFO); a transfer starts only after the capacity pass
// found room for the exact additional bytes plus the headroom; a copy is complete only when its record
// says so, and the record is written after every file was verified and renamed into place; deletion
// renames a directory away first, so a crash never leaves half a copy that looks complete.
import { mkdir, readdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "@ic/log";
import type { Clock } from "@ic/protocol";
import {
  modelIdFromDirName,
  StoreManifestSchema,
  type ModelId,
  type StorageReport,
  type StoreManifest,
} from "@ic/protocol";
import {
  noFitMessage,
  planEviction,
  type EvictionPlan,
  type EvictionTrigger,
  type NoFitMessageInput,
  type StagedCopy,
  Serial,
  type StagingSettings,
} from "@ic/staging";
import { nodeDisk, type Disk } from "../disk.ts";
import {
  executeFill,
  LinkFailedError,
  planFill,
  removeStale,
  type FillPlan,
  type FillStats,
} from "../transfer/fill.ts";
import type { HubFile, HubSource } from "../hub/hub.ts";
import { selectHubFiles } from "../hub/hub-select.ts";
import { isErrno, modelDir, removeDirAtomic, walkFiles } from "../paths.ts";
import { parseContentRange } from "../transfer/range.ts";
import {
  readRecord,
  RECORD_FILE,
  writeRecord,
  type RecordFile,
  type StagingRecord,
} from "../record.ts";
import { buildStorageReport } from "./storage-report.ts";
import { directGet } from "../transfer/direct-get.ts";
import {
  discard,
  errText,
  TransferError,
  type OpenAt,
  type OpenedStream,
} from "../transfer/transfer.ts";

/** Which models are in use on this node right now, from the state replica. */
export interface ModelUsage {
  /**
   * Models a live runner names directly. Include every model of an instance assigned to this node,
   * also while its runner is staging or warming up, so a lifecycle pass never removes it.
   */
  readonly live: ReadonlySet<ModelId>;
  /** Companions (MTP sidecar, drafter, split vision weights) of active models. */
  readonly companions: ReadonlySet<ModelId>;
}

export interface HubFallback {
  readonly source: HubSource;
  /** The node's model cache for direct hub downloads; checked for space on its own filesystem. */
  readonly modelCachePath: string;
}

export interface StagingClientOptions {
  /** node_cache_path, already expanded. */
  readonly root: string;
  /** Base URL of the store host (`http://host:port`); without it every stage goes to the hub. */
  readonly storeUrl?: string | undefined;
  /** The store's store_path when its files are visible on this machine; same filesystem => hardlinks. */
  readonly storeLocalPath?: string | undefined;
  readonly settings: StagingSettings;
  readonly usage?: (() => ModelUsage) | undefined;
  readonly hub?: HubFallback | undefined;
  readonly disk?: Disk | undefined;
  readonly clock?: Pick<Clock, "now"> | undefined;
  readonly logger: Logger;
  /** Headers sent with every store request (manifests and files), e.g. the bearer token. */
  readonly storeHeaders?: Readonly<Record<string, string>> | undefined;
  /**
   * Replaces the HTTP client of every store request. File bodies then come through fetch's web
   * stream and are copied chunk by chunk, which costs several times the CPU per byte of the direct
   * transport used without it; pass credentials as `storeHeaders` instead where possible.
   */
  readonly fetch?: typeof fetch | undefined;
  /** Timeout of a manifest request; the store counts as unreachable after it (default 10 s). */
  readonly manifestTimeoutMs?: number | undefined;
  /**
   * A file download (store or hub) that receives nothing for this long fails and is retried by the
   * caller, resuming from its partial (default DEFAULT_TRANSFER_IDLE_MS, 30 s).
   */
  readonly transferIdleTimeoutMs?: number | undefined;
}

export interface StageProgress {
  readonly modelId: ModelId;
  readonly file: string;
  readonly phase: "link" | "transfer";
  readonly fileDoneBytes: number;
  readonly fileBytes: number;
  /** Bytes of this model present so far (reused, resumed, linked and fetched). */
  readonly doneBytes: number;
  readonly totalBytes: number;
}

export interface StageOptions {
  /** Store host to stage from for this call; overrides the client's `storeUrl` (the store may move). */
  readonly storeUrl?: string | undefined;
  /** Companion repositories staged after the base, one transfer at a time, protected with it. */
  readonly companions?: readonly ModelId[] | undefined;
  /**
   * The GGUF the engine loads (the registered model's `file`): a direct hub download fetches that
   * quantization only, as the store host's pull did (see hub-select.ts).
   */
  readonly servedFile?: string | undefined;
  readonly onProgress?: ((p: StageProgress) => void) | undefined;
  readonly signal?: AbortSignal | undefined;
}

export interface StagedModel {
  readonly modelId: ModelId;
  /** Directory the engine loads from. */
  readonly path: string;
  /** store: copied or linked from the store host; hub: direct hub download into the model cache. */
  readonly source: "store" | "hub";
  readonly totalBytes: number;
  readonly fetchedBytes: number;
  readonly resumedBytes: number;
  readonly linkedBytes: number;
  readonly reusedBytes: number;
  /** Copies the capacity pass deleted to make room. */
  readonly evicted: ModelId[];
}

export const DOWNLOAD_FAILED_CAUSES = [
  "no_fit",
  "store_unreachable",
  "not_in_store",
  "store_error",
  "hub_error",
  "transfer",
  "integrity",
  "aborted",
] as const;
export type DownloadFailedCause = (typeof DOWNLOAD_FAILED_CAUSES)[number];

/** A transfer that did not happen or did not finish; the caller publishes it as a DownloadFailed event. */
export interface DownloadFailed {
  readonly ok: false;
  readonly type: "DownloadFailed";
  readonly modelId: ModelId;
  readonly cause: DownloadFailedCause;
  /** The event's reason; for no_fit it carries the byte arithmetic. */
  readonly message: string;
  readonly retryable: boolean;
  /** no_fit only: the numbers behind the message. */
  readonly arithmetic?: NoFitMessageInput;
  /** Models of the same request staged before the failure (base before a failed companion). */
  readonly staged: StagedModel[];
}

export type StageResult = { readonly ok: true; readonly models: StagedModel[] } | DownloadFailed;

/** One directory under the staging root. */
export interface StagedEntry {
  readonly modelId: ModelId;
  readonly path: string;
  readonly bytes: number;
  /** Bytes deleting the copy frees (files hardlinked from the store free nothing). */
  readonly freeableBytes: number;
  readonly lastUsedMs: number;
  readonly complete: boolean;
  readonly downloading: boolean;
  readonly inUse: boolean;
  readonly companionOfActive: boolean;
}

/** What a pass deleted; field names match the bus purge reply. */
export interface EvictionOutcome {
  readonly plan: EvictionPlan;
  readonly deleted: ModelId[];
  readonly freed_bytes: number;
  readonly failed: { modelId: ModelId; error: string }[];
}

/** Purge result, shaped like the `ic.store.purge` reply fields. */
export interface PurgeOutcome {
  readonly deleted: ModelId[];
  readonly freed_bytes: number;
  readonly skipped_in_use: ModelId[];
}

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

type ManifestFetch =
  | { kind: "ok"; manifest: StoreManifest }
  | { kind: "unreachable" | "not_in_store" | "store_error" | "aborted"; message: string };

const NO_USAGE: ModelUsage = { live: new Set(), companions: new Set() };

export class StagingClient implements AsyncDisposable {
  private readonly log: Logger;
  private readonly disk: Disk;
  private readonly clock: Pick<Clock, "now">;
  private readonly fetchFn: typeof fetch;
  private readonly serial = new Serial();
  private readonly downloading = new Set<ModelId>();
  /** Deletions of staged copies under way (a transfer of the same model waits for them). */
  private readonly removing = new Map<ModelId, Promise<void>>();
  private readonly controllers = new Set<AbortController>();
  private state: "idle" | "running" | "stopped" = "idle";

  constructor(private readonly opts: StagingClientOptions) {
    this.log = opts.logger.child({ component: "staging" });
    this.disk = opts.disk ?? nodeDisk;
    this.clock = opts.clock ?? { now: () => Date.now() };
    this.fetchFn = opts.fetch ?? fetch;
  }

  get root(): string {
    return this.opts.root;
  }

  /** Creates the root, removes leftovers of a crashed session and runs the startup recency pass. */
  async start(): Promise<EvictionOutcome> {
    if (this.state === "stopped") throw new Error("staging client was stopped");
    this.state = "running";
    await mkdir(this.opts.root, { recursive: true });
    const leftovers = await this.removeLeftovers();
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
    const usage = (this.opts.usage ?? (() => NO_USAGE))();
    let names: string[];
    try {
      names = await readdir(this.opts.root);
    } catch (e) {
      if (isErrno(e, "ENOENT")) return [];
      throw e;
    }
    const out: StagedEntry[] = [];
    for (const name of names.sort()) {
      if (name.startsWith(".")) continue;
      const modelId = modelIdFromDirName(name);
      if (!modelId) continue;
      const path = join(this.opts.root, name);
      let dirStat;
      try {
        dirStat = await stat(path);
      } catch (e) {
        if (isErrno(e, "ENOENT")) continue;
        throw e;
      }
      if (!dirStat.isDirectory()) continue;
      const files = await walkFiles(path);
      const rec = await readRecord(path, modelId);
      const record = rec.kind === "ok" ? rec.record : null;
      const sizes = new Map(files.map((f) => [f.path, f.bytes]));
      const complete =
        record !== null &&
        record.complete &&
        record.files.every((f) => sizes.get(f.path) === f.bytes);
      out.push({
        modelId,
        path,
        bytes: files.reduce((s, f) => s + f.bytes, 0),
        freeableBytes: files.reduce((s, f) => s + (f.nlink > 1 ? 0 : f.bytes), 0),
        lastUsedMs: record?.last_used_ms ?? dirStat.mtimeMs,
        complete,
        downloading: this.downloading.has(modelId),
        inUse: usage.live.has(modelId),
        companionOfActive: usage.companions.has(modelId),
      });
    }
    return out;
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

  private async removeLeftovers(): Promise<number> {
    let removed = 0;
    for (const name of await readdir(this.opts.root)) {
      const path = join(this.opts.root, name);
      if (name.startsWith(".deleting-")) {
        await rm(path, { recursive: true, force: true });
        removed++;
        continue;
      }
      const modelId = modelIdFromDirName(name);
      if (!modelId || !(await stat(path)).isDirectory()) continue;
      for (const f of await walkFiles(path)) {
        const base = f.path.split("/").at(-1) ?? "";
        if (base.startsWith(".") && (base.endsWith(".tmp") || base.includes(".link-"))) {
          await rm(join(path, ...f.path.split("/")), { force: true });
          removed++;
        }
      }
    }
    return removed;
  }

  // ---- one transfer ----

  private async stageOne(
    modelId: ModelId,
    request: readonly ModelId[],
    options: StageOptions,
  ): Promise<{ ok: true; model: StagedModel } | Omit<DownloadFailed, "staged">> {
    // Staging works before start() too (the root is created on demand); only stop() refuses.
    if (this.state === "stopped") {
      return this.failure(modelId, "aborted", "staging client is stopped");
    }
    const storeUrl = options.storeUrl ?? this.opts.storeUrl;
    const controller = new AbortController();
    const onAbort = () => controller.abort(options.signal?.reason);
    if (options.signal?.aborted) onAbort();
    options.signal?.addEventListener("abort", onAbort, { once: true });
    this.controllers.add(controller);
    try {
      if (!storeUrl) {
        if (this.opts.hub) return await this.fromHub(modelId, options, controller.signal);
        return this.failure(
          modelId,
          "store_unreachable",
          "no store URL and no model hub configured",
        );
      }
      const m = await this.fetchManifest(storeUrl, modelId, controller.signal);
      if (m.kind === "unreachable" && this.opts.hub) {
        this.log.warn(
          { modelId, reason: m.message },
          "store unreachable; direct model-hub download",
        );
        return await this.fromHub(modelId, options, controller.signal);
      }
      if (m.kind !== "ok") {
        const cause = m.kind === "unreachable" ? "store_unreachable" : m.kind;
        return this.failure(modelId, cause, m.message);
      }
      return await this.fromStore(
        storeUrl,
        modelId,
        m.manifest,
        request,
        options,
        controller.signal,
        true,
      );
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
    storeUrl: string,
    modelId: ModelId,
    manifest: StoreManifest,
    request: readonly ModelId[],
    options: StageOptions,
    signal: AbortSignal,
    allowLinks: boolean,
  ): Promise<{ ok: true; model: StagedModel } | Omit<DownloadFailed, "staged">> {
    this.downloading.add(modelId);
    try {
      await this.removing.get(modelId);
      return await this.fillFromStore(
        storeUrl,
        modelId,
        manifest,
        request,
        options,
        signal,
        allowLinks,
      );
    } finally {
      this.downloading.delete(modelId);
    }
  }

  /**
   * The fill step of a copy (store or hub): the record (incomplete) first, so a crash leaves a copy
   * that resumes; then every file fetched, resumed, linked or reused and verified (executeFill).
   * commitCopy follows. The copy is still marked downloading meanwhile, so no eviction pass can
   * delete it while it is finalized.
   */
  private async fillCopy(
    dir: string,
    record: StagingRecord,
    plan: FillPlan,
    open: (file: RecordFile) => OpenAt,
    options: StageOptions,
    signal: AbortSignal,
  ): Promise<FillStats> {
    await mkdir(dir, { recursive: true });
    await writeRecord(dir, record);
    const modelId = record.model_id;
    return executeFill({
      idleTimeoutMs: this.opts.transferIdleTimeoutMs,
      dir,
      plan,
      signal,
      open,
      onProgress: options.onProgress && ((p) => options.onProgress?.({ modelId, ...p })),
    });
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
    | { ok: false; failure: Omit<DownloadFailed, "staged"> }
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
        failure: { ...this.failure(modelId, "no_fit", noFitMessage(arithmetic)), arithmetic },
      };
    };
    if (!evict.fits) return refuse(space.freeBytes, evict.capacity?.reclaimableBytes ?? 0);
    const applied = await this.apply(evict);
    if (applied.failed.length > 0) return refuse(space.freeBytes + applied.freed_bytes, 0);
    return { ok: true, space, applied };
  }

  private async fillFromStore(
    storeUrl: string,
    modelId: ModelId,
    manifest: StoreManifest,
    request: readonly ModelId[],
    options: StageOptions,
    signal: AbortSignal,
    allowLinks: boolean,
  ): Promise<{ ok: true; model: StagedModel } | Omit<DownloadFailed, "staged">> {
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
    const linkFrom = allowLinks ? await this.linkSource(modelId) : undefined;
    const plan = await planFill(dir, files, priorRecord, linkFrom);

    const admitted = await this.admit(modelId, plan, request);
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
    let stats: FillStats;
    try {
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
      stats = await this.fillCopy(
        dir,
        record,
        plan,
        (file) => this.storeOpener(storeUrl, modelId, file),
        options,
        signal,
      );
      await commitCopy(dir, record, stats, this.clock.now());
    } catch (e) {
      if (e instanceof LinkFailedError) {
        this.log.warn({ modelId, err: e }, "hardlink failed; admitting again as a copy");
        return await this.fillFromStore(
          storeUrl,
          modelId,
          manifest,
          request,
          options,
          signal,
          false,
        );
      }
      return this.transferFailure(modelId, e);
    }
    this.log.info({ modelId, ...statsLog(stats) }, "staged");
    return { ok: true, model: stagedModel(modelId, dir, "store", plan, stats, applied.deleted) };
  }

  /**
   * Rule 8: direct hub download into the model cache when the store is unreachable. The exact check
   * runs against the model cache's filesystem; nothing is evicted and the staging root plays no part.
   */
  private async fromHub(
    modelId: ModelId,
    options: StageOptions,
    signal: AbortSignal,
  ): Promise<{ ok: true; model: StagedModel } | Omit<DownloadFailed, "staged">> {
    const hub = this.opts.hub;
    if (!hub) return this.failure(modelId, "store_unreachable", "no model hub configured");
    const listed = await this.hubListing(hub, modelId, options, signal);
    if (!listed.ok) return listed.failure;
    const { listing, selection } = listed;
    await mkdir(hub.modelCachePath, { recursive: true });
    const dir = modelDir(hub.modelCachePath, modelId);
    const prior = await readRecord(dir, modelId);
    const priorRecord = prior.kind === "ok" ? prior.record : null;
    const files = selection.files.map(hubRecordFile);
    const plan = await planFill(dir, files, priorRecord);
    const space = await this.disk.space(hub.modelCachePath);
    if (space.freeBytes < plan.additionalBytes + this.opts.settings.headroomBytes) {
      const arithmetic: NoFitMessageInput = {
        modelId,
        path: hub.modelCachePath,
        manifestBytes: plan.manifestBytes,
        requiredBytes: plan.additionalBytes,
        headroomBytes: this.opts.settings.headroomBytes,
        freeBytes: space.freeBytes,
        reclaimableBytes: 0,
      };
      return { ...this.failure(modelId, "no_fit", noFitMessage(arithmetic)), arithmetic };
    }
    const record: StagingRecord = {
      version: 1,
      model_id: modelId,
      source: "hub",
      revision: listing.revision,
      files,
      total_bytes: plan.manifestBytes,
      complete: false,
      last_used_ms: priorRecord?.last_used_ms ?? this.clock.now(),
    };
    let stats: FillStats;
    try {
      const byPath = new Map(listing.files.map((f) => [f.path, f]));
      stats = await this.fillCopy(
        dir,
        record,
        plan,
        // At the commit the listing named, so a moving branch cannot mix two versions.
        (file) => (offset, sig) =>
          hub.source.open(modelId, byPath.get(file.path) ?? file, offset, sig, listing.revision),
        options,
        signal,
      );
    } catch (e) {
      return this.transferFailure(modelId, e);
    }
    await commitCopy(dir, record, stats, this.clock.now());
    this.log.info({ modelId, path: dir, ...statsLog(stats) }, "downloaded from the model hub");
    return { ok: true, model: stagedModel(modelId, dir, "hub", plan, stats, []) };
  }

  /** Fetch, first step of a hub download: the model's listing and the files to take from it. */
  private async hubListing(
    hub: HubFallback,
    modelId: ModelId,
    options: StageOptions,
    signal: AbortSignal,
  ) {
    const fail = (failure: Omit<DownloadFailed, "staged">) => ({ ok: false as const, failure });
    let listing;
    try {
      listing = await hub.source.list(modelId, signal);
    } catch (e) {
      return fail(
        this.failure(
          modelId,
          "hub_error",
          `cannot list ${modelId} on the model hub: ${errText(e)}`,
        ),
      );
    }
    if (listing.files.length === 0) {
      return fail(
        this.failure(modelId, "hub_error", `${modelId} has no artifact files on the model hub`),
      );
    }
    const selection = selectHubFiles(listing.files, { file: options.servedFile });
    if (!selection.ok)
      return fail(this.failure(modelId, "hub_error", `${modelId}: ${selection.message}`));
    return { ok: true as const, listing, selection };
  }

  // ---- store access ----

  private modelUrl(storeUrl: string, modelId: ModelId): string {
    const [org, name] = modelId.split("/") as [string, string];
    const base = storeUrl.replace(/\/+$/, "");
    return `${base}/store/models/${encodeURIComponent(org)}/${encodeURIComponent(name)}`;
  }

  private async fetchManifest(
    storeUrl: string,
    modelId: ModelId,
    signal: AbortSignal,
  ): Promise<ManifestFetch> {
    const url = `${this.modelUrl(storeUrl, modelId)}/manifest`;
    const timeout = AbortSignal.timeout(this.opts.manifestTimeoutMs ?? 10_000);
    let res: Response;
    try {
      res = await this.fetchFn(url, {
        headers: { ...this.opts.storeHeaders },
        signal: AbortSignal.any([signal, timeout]),
      });
    } catch (e) {
      if (signal.aborted) return { kind: "aborted", message: `staging ${modelId} aborted` };
      return {
        kind: "unreachable",
        message: `store at ${storeUrl} unreachable: ${errText(e)}`,
      };
    }
    if (res.status === 404) {
      await res.body?.cancel();
      return { kind: "not_in_store", message: `${modelId} is not registered in the store` };
    }
    if (res.status >= 500) {
      await res.body?.cancel();
      return {
        kind: "unreachable",
        message: `store answered ${res.status} for the manifest of ${modelId}`,
      };
    }
    if (!res.ok) {
      await res.body?.cancel();
      return {
        kind: "store_error",
        message: `store answered ${res.status} for the manifest of ${modelId}`,
      };
    }
    let json: unknown;
    try {
      json = await res.json();
    } catch (e) {
      return { kind: "store_error", message: `manifest of ${modelId} is not JSON: ${errText(e)}` };
    }
    const parsed = StoreManifestSchema.safeParse(json);
    if (!parsed.success || parsed.data.model_id !== modelId) {
      const why = parsed.success ? `names ${parsed.data.model_id}` : parsed.error.message;
      return {
        kind: "store_error",
        message: `invalid manifest for ${modelId} from the store: ${why}`,
      };
    }
    return { kind: "ok", manifest: parsed.data };
  }

  private storeOpener(storeUrl: string, modelId: ModelId, file: RecordFile): OpenAt {
    const url = `${this.modelUrl(storeUrl, modelId)}/files/${file.path.split("/").map(encodeURIComponent).join("/")}`;
    return async (offset, signal) => {
      const headers: Record<string, string> = { ...this.opts.storeHeaders };
      if (offset > 0) {
        headers.range = `bytes=${offset}-`;
        if (file.sha256) headers["if-range"] = `"${file.sha256}"`;
      }
      const res = await this.getFile(url, headers, signal);
      if (res.status === 206) {
        const cr = parseContentRange(res.contentRange);
        if (!cr || cr.total !== file.bytes) {
          await discard(res.body);
          throw new Error(`bad content-range ${res.contentRange} for ${file.path}`);
        }
        return { body: res.body, offset: cr.start };
      }
      if (res.status === 200) return { body: res.body, offset: 0 };
      await discard(res.body);
      throw new Error(`store answered ${res.status} for ${file.path}`);
    };
  }

  /**
   * One file request: read straight into the transfer's slabs over plain http; through the injected
   * fetch when there is one (or for an https store), as a web stream.
   */
  private async getFile(
    url: string,
    headers: Record<string, string>,
    signal: AbortSignal,
  ): Promise<{ status: number; contentRange: string | null; body: OpenedStream["body"] }> {
    const u = new URL(url);
    if (!this.opts.fetch && u.protocol === "http:") {
      const res = await directGet(u, headers, signal);
      return {
        status: res.status,
        contentRange: res.headers.get("content-range") ?? null,
        body: res.body,
      };
    }
    const res = await this.fetchFn(url, { headers, signal });
    if (!res.body) throw new Error(`store answered ${res.status} without a body for ${url}`);
    return { status: res.status, contentRange: res.headers.get("content-range"), body: res.body };
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

  // ---- results ----

  private failure(
    modelId: ModelId,
    cause: DownloadFailedCause,
    message: string,
  ): Omit<DownloadFailed, "staged"> {
    this.log.warn({ modelId, cause }, message);
    return {
      ok: false,
      type: "DownloadFailed",
      modelId,
      cause,
      message,
      retryable: RETRYABLE[cause],
    };
  }

  private transferFailure(modelId: ModelId, e: unknown): Omit<DownloadFailed, "staged"> {
    if (e instanceof TransferError) {
      const cause: DownloadFailedCause = e.kind;
      const hint =
        e.kind === "integrity" ? "" : "; the partial is kept and the next attempt resumes";
      return this.failure(modelId, cause, `staging ${modelId} failed: ${e.message}${hint}`);
    }
    this.log.error({ modelId, err: e }, "staging failed unexpectedly");
    return this.failure(modelId, "transfer", `staging ${modelId} failed: ${errText(e)}`);
  }
}

function toCopy(e: StagedEntry): StagedCopy {
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

function hubRecordFile(f: HubFile): RecordFile {
  return {
    path: f.path,
    bytes: f.bytes,
    ...(f.sha256 ? { sha256: f.sha256 } : {}),
    ...(f.gitOid ? { git_oid: f.gitOid } : {}),
  };
}

function statsLog(s: FillStats) {
  return {
    fetchedBytes: s.fetchedBytes,
    resumedBytes: s.resumedBytes,
    linkedBytes: s.linkedBytes,
    reusedBytes: s.reusedBytes,
  };
}

/**
 * Commit, last step of a copy: the files' verified hashes into the record, files the record does not
 * name removed, and the record marked complete (a copy without it is resumed, never served).
 */
async function commitCopy(
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
function stagedModel(
  modelId: ModelId,
  dir: string,
  source: "store" | "hub",
  plan: { readonly manifestBytes: number },
  stats: FillStats,
  evicted: readonly ModelId[],
): StagedModel {
  return {
    modelId,
    path: dir,
    source,
    totalBytes: plan.manifestBytes,
    fetchedBytes: stats.fetchedBytes,
    resumedBytes: stats.resumedBytes,
    // A hub download links nothing (its fill has no link source).
    linkedBytes: source === "hub" ? 0 : stats.linkedBytes,
    reusedBytes: stats.reusedBytes,
    evicted: [...evicted],
  };
}
