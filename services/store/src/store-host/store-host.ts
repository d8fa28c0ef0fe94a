// The store host: registers artifacts under store_path/<org>--<name>/ with an exact manifest and serves
// manifests and files over HTTP with Range; downloads repos from the model hub into the store.
//
// Invariants: the store never deletes artifacts (it is never an eviction source, rule 7); only files a
// registered manifest names are served, and only while their size still matches it; hub downloads
// check the exact selected-manifest bytes plus the reserve against store_path before writing anything,
// serialized with the transfer so two downloads never count the same free bytes. Hashing (a directory
// without a manifest, old manifests' piece hashes) runs in one bounded background pool
// (store-models.ts): a model with a valid manifest is served at start without waiting for it.
import { mkdir, readdir, readFile, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
import type { Hono } from "hono";
import { serve, type ServerType } from "@hono/node-server";
import type { Logger } from "@ic/log";
import type { Clock } from "@ic/protocol";
import {
  ModelJsonSchema,
  modelIdFromDirName,
  ServiceError,
  type ModelId,
  type StoreManifest,
} from "@ic/protocol";
import { Serial } from "@ic/staging";
import { nodeDisk, type Disk } from "../disk.ts";
import { executeFill, plannedTotals, removeStale } from "../transfer/fill.ts";
import type { HubSource } from "../transfer/hub.ts";
import { selectHubFiles } from "../transfer/hub-select.ts";
import { modelDir, removeDirAtomic } from "../paths.ts";
import { writeRecord, type RecordFile } from "../record.ts";
import { hubCopyRecord, hubOpener, planHubCopy } from "../transfer/hub-download.ts";
import { errText, TransferError } from "../transfer/transfer.ts";
import { storeHostApp } from "./routes.ts";
import {
  DOWNLOAD_RECORD_FILE,
  priorForDownload,
  pullFailure,
  type HubDownloadOptions,
  type HubDownloadResult,
} from "./pull-plan.ts";
import { MANIFEST_FILE, writeManifest } from "./manifests.ts";
import type { HashJobProgress } from "./hash-pool.ts";
import type { Admission } from "./store-watch.ts";
import { StoreModels, type ChangedModel } from "./store-models.ts";

export interface StoreHostOptions {
  /** store_path, already expanded. */
  readonly storePath: string;
  readonly logger: Logger;
  readonly disk?: Disk | undefined;
  /** Free bytes store_path must keep after a hub download (spec: 10 GiB); read at each pull. */
  readonly headroomBytes: number | { readonly headroomBytes: number };
  readonly hub?: HubSource | undefined;
  readonly clock?: Pick<Clock, "now"> | undefined;
  /** A hub file that sends nothing for this long fails, its partial kept (default 30 s). */
  readonly transferIdleTimeoutMs?: number | undefined;
  /** Size of the pieces manifests list hashes of (PIECE_BYTES; smaller in tests). */
  readonly pieceBytes?: number | undefined;
  /** Models hashed at once in the background (registration, piece-hash backfill; default 1). */
  readonly hashConcurrency?: number | undefined;
  /** The served models changed (a hash finished, a model was found changed): register again. */
  readonly onModelsChanged?: (() => void) | undefined;
  /** A served model was withdrawn: a backfill found a file whose sha256 differs from its manifest. */
  readonly onWithdrawn?: ((id: ModelId) => void) | undefined;
}

export interface ListenOptions {
  readonly host?: string;
  /** 0 picks a free port. */
  readonly port?: number;
}

export interface StoreStats {
  readonly bytes_served: number;
  readonly file_requests: number;
  readonly range_requests: number;
  /** File responses still reading their file (a client gone is one until its read is cancelled). */
  readonly open_bodies: number;
}

export class StoreHost implements AsyncDisposable {
  readonly app: Hono;
  private readonly log: Logger;
  private readonly disk: Disk;
  private readonly clock: Pick<Clock, "now">;
  private readonly catalog: StoreModels;
  private readonly manifests: Map<ModelId, StoreManifest>;
  private readonly serial = new Serial();
  private readonly controllers = new Set<AbortController>();
  private server: ServerType | null = null;
  private listenUrl: string | undefined;
  private readonly counters = {
    bytes_served: 0,
    file_requests: 0,
    range_requests: 0,
    open_bodies: 0,
  };
  private state: "idle" | "running" | "stopped" = "idle";

  constructor(private readonly opts: StoreHostOptions) {
    this.log = opts.logger.child({ component: "store-host" });
    this.disk = opts.disk ?? nodeDisk;
    this.clock = opts.clock ?? { now: () => Date.now() };
    this.catalog = new StoreModels({
      storePath: opts.storePath,
      log: this.log,
      clock: this.clock,
      pieceBytes: opts.pieceBytes,
      hashConcurrency: opts.hashConcurrency,
      onChange: opts.onModelsChanged,
      onWithdrawn: opts.onWithdrawn,
    });
    this.manifests = this.catalog.served;
    this.app = storeHostApp({
      log: this.log,
      models: () => this.models(),
      manifest: (id) => this.manifest(id),
      modelPath: (id) => this.modelPath(id),
      uploads: {
        storePath: opts.storePath,
        disk: this.disk,
        headroomBytes: () => this.headroomBytes(),
        inStore: (id) => this.manifests.has(id),
      },
      counters: this.counters,
    });
  }

  /** Base URL once listening, e.g. `http://127.0.0.1:41234`. */
  get url(): string | undefined {
    return this.listenUrl;
  }

  stats(): StoreStats {
    return { ...this.counters };
  }

  /**
   * Serves the models whose manifests match their files and queues the background hashes (new
   * directories, old manifests' piece hashes; their files go whole until then); listens when
   * `listen` is given.
   */
  async start(listen?: ListenOptions): Promise<void> {
    if (this.state !== "idle") return;
    this.state = "running";
    await mkdir(this.opts.storePath, { recursive: true });
    await this.catalog.load();
    if (listen) {
      const hostname = listen.host ?? "127.0.0.1";
      await new Promise<void>((resolve, reject) => {
        const server = serve(
          { fetch: this.app.fetch, hostname, port: listen.port ?? 0 },
          (info) => {
            const h = hostname.includes(":") ? `[${hostname}]` : hostname;
            this.listenUrl = `http://${h}:${(info as AddressInfo).port}`;
            resolve();
          },
        );
        server.once("error", reject);
        this.server = server;
      });
      this.log.info({ url: this.listenUrl, models: this.manifests.size }, "store host listening");
    }
  }

  async stop(): Promise<void> {
    if (this.state === "stopped") return;
    this.state = "stopped";
    for (const c of this.controllers) c.abort(new Error("store host stopping"));
    await this.catalog.stop();
    const server = this.server;
    this.server = null;
    if (server) {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
      });
    }
    await this.serial.run(async () => undefined);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  manifest(modelId: ModelId): StoreManifest | undefined {
    return this.manifests.get(modelId);
  }

  models(): StoreManifest[] {
    return [...this.manifests.values()].sort((a, b) => (a.model_id < b.model_id ? -1 : 1));
  }

  /** Directory of a model in the store (also what a store host's own runners load from). */
  modelPath(modelId: ModelId): string {
    return modelDir(this.opts.storePath, modelId);
  }

  /**
   * Registers the files in store_path/<org>--<name>/ (every non-dot file, recursively) with their
   * exact sizes and sha256, and writes the manifest: a job of the background hashing pool.
   */
  register(modelId: ModelId): Promise<StoreManifest> {
    return this.catalog.register(modelId);
  }

  /**
   * Registers every model directory of store_path that has no manifest served yet, through the
   * hashing pool, and waits for them: for tools and benchmarks that fill a store and serve it at
   * once. A node leaves this to its store watch (admitted once settled, never waited on).
   */
  async registerAll(): Promise<StoreManifest[]> {
    const out: StoreManifest[] = [];
    for (const name of (await readdir(this.opts.storePath)).sort()) {
      const id = modelIdFromDirName(name);
      if (!id || this.manifest(id)) continue;
      if (!(await stat(join(this.opts.storePath, name))).isDirectory()) continue;
      out.push(await this.register(id));
    }
    return out;
  }

  /** A settled directory (store watch): served, reported as changed, or queued for hashing. */
  admit(modelId: ModelId): Promise<Admission> {
    return this.catalog.admit(modelId);
  }

  /** A served model's file sizes against its manifest: one that differs is withdrawn, reported. */
  verify(modelId: ModelId): Promise<"ok" | "changed" | "gone"> {
    return this.catalog.verify(modelId);
  }

  /** The directory signature of a model whose files differ from its manifest (else undefined). */
  changedSignature(modelId: ModelId): string | undefined {
    return this.catalog.changedSignature(modelId);
  }

  /** Models not served because their files differ from their manifest (nodeHealth). */
  changedModels(): ChangedModel[] {
    return this.catalog.changedModels();
  }

  /** The background hashing pool's jobs with their progress (nodeHealth). */
  hashing(): HashJobProgress[] {
    return this.catalog.hashing();
  }

  /**
   * Deletes a model from the store (its directory, atomically: renamed away first, then removed) and
   * stops serving it. Serialized with registrations and hub downloads. The caller has taken it out
   * of the cluster's registry first (DeregisterModel, refused while anything uses it).
   */
  remove(modelId: ModelId): Promise<void> {
    return this.serial.run(async () => {
      const dir = this.modelPath(modelId);
      const exists = await stat(dir).then(
        () => true,
        () => false,
      );
      if (!this.manifests.has(modelId) && !exists)
        throw new ServiceError("not_found", `${modelId} is not in the store`);
      this.catalog.forget(modelId, "removed from the store");
      await removeDirAtomic(this.opts.storePath, dir);
      this.log.info({ modelId }, "removed from the store");
    });
  }

  /** Stops serving (or hashing, or reporting) a model whose directory disappeared (removed by hand). */
  forget(modelId: ModelId): void {
    if (this.catalog.forget(modelId, "its directory is gone"))
      this.log.warn({ modelId }, "model directory gone from store_path; no longer served");
  }

  /**
   * Rule 7: downloads a repo's selected files from the model hub into the store and registers them.
   * The exact additional bytes plus the reserve must fit on store_path before anything is written.
   */
  downloadFromHub(modelId: ModelId, options: HubDownloadOptions = {}): Promise<HubDownloadResult> {
    return this.serial.run(() => this.downloadNow(modelId, options));
  }

  /**
   * The companions a model's model.json names (drafter, MTP sidecar) that the store does not hold:
   * what a pull of it fetches next. [] without a readable model.json.
   */
  async missingCompanions(modelId: ModelId): Promise<ModelId[]> {
    let doc: unknown;
    try {
      doc = JSON.parse(await readFile(join(this.modelPath(modelId), "model.json"), "utf8"));
    } catch {
      return [];
    }
    const parsed = ModelJsonSchema.safeParse(doc);
    if (!parsed.success) return [];
    return [parsed.data.drafter, parsed.data.mtp_sidecar].filter(
      (id): id is ModelId => id !== undefined && id !== modelId && !this.manifests.has(id),
    );
  }

  /**
   * Checks a quantization selector against the repo before a pull is queued: `invalid_request`
   * naming the available ones when the repo has no such quantization. A hub that cannot be listed
   * now is not an answer: the pull is queued and says so when it runs.
   */
  async checkQuant(modelId: ModelId, quant: string, revision?: string): Promise<void> {
    const hub = this.opts.hub;
    if (!hub) return;
    let listing;
    try {
      // Within the 10 s the asking node waits for the store host's answer on the bus.
      listing = await hub.list(modelId, AbortSignal.timeout(5000), revision);
    } catch {
      return;
    }
    const sel = selectHubFiles(listing.files, { quant });
    if (!sel.ok)
      throw new ServiceError("invalid_request", `${modelId}: ${sel.message}`, {
        details: { available: sel.variants.map((v) => v.label) },
      });
  }

  /** Free bytes store_path keeps after a write, as configured now (the settings editor may change it). */
  private headroomBytes(): number {
    const h = this.opts.headroomBytes;
    return typeof h === "number" ? h : h.headroomBytes;
  }

  // ---- hub downloads ----

  /**
   * Commit, last step of a pull: files the pull did not select go, the model is registered with the
   * hashes the fill verified, and the download record is dropped.
   */
  private async commitPull(
    modelId: ModelId,
    dir: string,
    pulled: {
      readonly files: readonly RecordFile[];
      readonly sha256: ReadonlyMap<string, string>;
      readonly revision: string | undefined;
    },
  ): Promise<StoreManifest> {
    const { files, sha256, revision } = pulled;
    // Another quantization pulled before under this id is not served beside this one.
    const stale = await removeStale(
      dir,
      files.map((f) => f.path),
      [DOWNLOAD_RECORD_FILE, MANIFEST_FILE],
    );
    if (stale.length > 0)
      this.log.info({ modelId, removed: stale }, "removed files the pull did not select");
    const manifest = await writeManifest({
      dir,
      modelId,
      source: "hub",
      known: new Map(sha256),
      revision,
      nowMs: this.clock.now(),
      log: this.log,
      pieceBytes: this.opts.pieceBytes,
    });
    this.catalog.serve(modelId, manifest);
    await rm(join(dir, DOWNLOAD_RECORD_FILE), { force: true });
    return manifest;
  }

  private async downloadNow(
    modelId: ModelId,
    options: HubDownloadOptions,
  ): Promise<HubDownloadResult> {
    const fail = pullFailure(this.log, modelId);
    const hub = this.opts.hub;
    if (!hub) return fail("hub_error", "no model hub configured on the store host");
    if (this.state !== "running") return fail("aborted", "store host is not running");
    const controller = new AbortController();
    const onAbort = () => controller.abort(options.signal?.reason);
    if (options.signal?.aborted) onAbort();
    options.signal?.addEventListener("abort", onAbort, { once: true });
    this.controllers.add(controller);
    try {
      const dir = modelDir(this.opts.storePath, modelId);
      const planned = await planHubCopy({
        hub,
        modelId,
        revision: options.revision,
        select: { quant: options.quant },
        dir,
        volume: { path: this.opts.storePath, disk: this.disk, headroomBytes: this.headroomBytes() },
        prior: (files) => priorForDownload(this.manifests.get(modelId), modelId, dir, files),
        signal: controller.signal,
        onSelected: options.onSelected,
      });
      if (!planned.ok) return fail(planned.cause, planned.message, planned.arithmetic);
      const { files, plan } = planned;
      const record = hubCopyRecord(modelId, planned, this.clock.now());
      // Files are about to change under the manifest: stop serving (and hashing) until registered.
      this.catalog.forget(modelId, "a pull rewrites its files");
      await mkdir(dir, { recursive: true });
      await writeRecord(dir, record, DOWNLOAD_RECORD_FILE);
      options.onProgress?.(plannedTotals(plan));
      let stats;
      try {
        stats = await executeFill({
          dir,
          plan,
          signal: controller.signal,
          idleTimeoutMs: this.opts.transferIdleTimeoutMs,
          open: hubOpener(hub, modelId, planned.listing),
          onProgress: options.onProgress,
        });
      } catch (e) {
        if (e instanceof TransferError)
          return fail(e.kind, `hub download of ${modelId} failed: ${e.message}`);
        return fail("transfer", `hub download of ${modelId} failed: ${errText(e)}`);
      }
      const manifest = await this.commitPull(modelId, dir, {
        files,
        sha256: stats.sha256,
        revision: planned.listing.revision,
      });
      return {
        ok: true,
        manifest,
        fetchedBytes: stats.fetchedBytes,
        resumedBytes: stats.resumedBytes,
        reusedBytes: stats.reusedBytes,
      };
    } finally {
      options.signal?.removeEventListener("abort", onAbort);
      this.controllers.delete(controller);
    }
  }
}
