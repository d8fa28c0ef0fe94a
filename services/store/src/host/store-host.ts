// The store host: registers artifacts under store_path/<org>--<name>/ with an exact manifest and serves
// manifests and files over HTTP with Range; downloads repos from the model hub into the store.
//
// Invariants: the store never deletes artifacts (it is never an eviction source, rule 7); only files a
// registered manifest names are served, and only while their size still matches it; hub downloads
// check the exact selected-manifest bytes plus the reserve against store_path before writing anything,
// serialized with the transfer so two downloads never count the same free bytes.
import { createReadStream } from "node:fs";
import { lstat, mkdir, readdir, readFile, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { createHash } from "node:crypto";
import type { AddressInfo } from "node:net";
import { Hono } from "hono";
import { routePath } from "hono/route";
import { serve, type ServerType } from "@hono/node-server";
import type { Logger } from "@ic/log";
import type { Clock } from "@ic/protocol";
import {
  artifactPathProblem,
  errorBody,
  httpStatusFor,
  ModelIdSchema,
  ModelJsonSchema,
  modelIdFromDirName,
  ServiceError,
  StoreManifestSchema,
  type ManifestFile,
  type ModelId,
  type StoreManifest,
  type StoreModelList,
} from "@ic/protocol";
import { noFitMessage, type NoFitMessageInput } from "@ic/staging";
import { nodeDisk, type Disk } from "../disk.ts";
import {
  executeFill,
  planFill,
  plannedTotals,
  removeStale,
  type FillTotals,
} from "../transfer/fill.ts";
import type { HubSource } from "../hub/hub.ts";
import { selectHubFiles } from "../hub/hub-select.ts";
import {
  artifactFile,
  hashFile,
  isErrno,
  modelDir,
  removeDirAtomic,
  walkFiles,
  writeJsonAtomic,
} from "../paths.ts";
import { parseRange } from "../transfer/range.ts";
import { fileBody } from "./file-body.ts";
import { readRecord, writeRecord, type RecordFile, type StagingRecord } from "../record.ts";
import { Serial } from "@ic/staging";
import { errText, TransferError } from "../transfer/transfer.ts";
import { Uploads } from "./uploads.ts";

/** Manifest of a registered model, inside its store directory (dotfiles are never artifacts). */
export const MANIFEST_FILE = ".ic-manifest.json";
/** Progress record of a store-side hub download, removed once the manifest is written. */
export const DOWNLOAD_RECORD_FILE = ".ic-download.json";

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

export class StoreHost implements AsyncDisposable {
  readonly app: Hono;
  private readonly log: Logger;
  private readonly disk: Disk;
  private readonly clock: Pick<Clock, "now">;
  private readonly manifests = new Map<ModelId, StoreManifest>();
  private readonly serial = new Serial();
  private readonly controllers = new Set<AbortController>();
  private server: ServerType | null = null;
  private listenUrl: string | undefined;
  private counters = { bytes_served: 0, file_requests: 0, range_requests: 0, open_bodies: 0 };
  private state: "idle" | "running" | "stopped" = "idle";

  constructor(private readonly opts: StoreHostOptions) {
    this.log = opts.logger.child({ component: "store-host" });
    this.disk = opts.disk ?? nodeDisk;
    this.clock = opts.clock ?? { now: () => Date.now() };
    this.app = this.routes();
  }

  /** Base URL once listening, e.g. `http://127.0.0.1:41234`. */
  get url(): string | undefined {
    return this.listenUrl;
  }

  stats(): StoreStats {
    return { ...this.counters };
  }

  /** Loads the manifests already in store_path; listens when `listen` is given. */
  async start(listen?: ListenOptions): Promise<void> {
    if (this.state !== "idle") return;
    this.state = "running";
    await mkdir(this.opts.storePath, { recursive: true });
    await this.loadManifests();
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
   * exact sizes and sha256, and writes the manifest. Serialized with hub downloads.
   */
  register(modelId: ModelId): Promise<StoreManifest> {
    return this.serial.run(() => this.registerNow(modelId, "local"));
  }

  /** Registers every model directory of store_path that has no valid manifest yet. */
  async registerAll(): Promise<StoreManifest[]> {
    const out: StoreManifest[] = [];
    for (const name of (await readdir(this.opts.storePath)).sort()) {
      const id = modelIdFromDirName(name);
      if (!id || this.manifests.has(id)) continue;
      if (!(await stat(join(this.opts.storePath, name))).isDirectory()) continue;
      out.push(await this.register(id));
    }
    return out;
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
      this.manifests.delete(modelId);
      await removeDirAtomic(this.opts.storePath, dir);
      this.log.info({ modelId }, "removed from the store");
    });
  }

  /** Stops serving a model whose directory disappeared (removed by hand). */
  forget(modelId: ModelId): void {
    if (this.manifests.delete(modelId))
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

  // ---- registration ----

  private async loadManifests(): Promise<void> {
    for (const name of await readdir(this.opts.storePath)) {
      const id = modelIdFromDirName(name);
      if (!id) continue;
      const dir = join(this.opts.storePath, name);
      let text: string;
      try {
        text = await readFile(join(dir, MANIFEST_FILE), "utf8");
      } catch (e) {
        if (isErrno(e, "ENOENT") || isErrno(e, "ENOTDIR")) continue;
        throw e;
      }
      const parsed = StoreManifestSchema.safeParse(safeJson(text));
      if (!parsed.success || parsed.data.model_id !== id) {
        this.log.warn(
          { modelId: id },
          "ignoring an invalid store manifest; register the model again",
        );
        continue;
      }
      const changed = await this.changedFiles(dir, parsed.data.files);
      if (changed.length > 0) {
        this.log.warn(
          { modelId: id, changed },
          "store files differ from their manifest; not served until registered again",
        );
        continue;
      }
      this.manifests.set(id, parsed.data);
    }
  }

  private async changedFiles(dir: string, files: readonly ManifestFile[]): Promise<string[]> {
    const changed: string[] = [];
    for (const f of files) {
      try {
        const s = await lstat(artifactFile(dir, f.path));
        if (!s.isFile() || s.size !== f.bytes) changed.push(f.path);
      } catch {
        changed.push(f.path);
      }
    }
    return changed;
  }

  private async registerNow(
    modelId: ModelId,
    source: "local" | "hub",
    known: ReadonlyMap<string, string> = new Map(),
    revision?: string,
  ): Promise<StoreManifest> {
    const dir = this.modelPath(modelId);
    const found = await walkFiles(dir);
    const files: ManifestFile[] = [];
    for (const f of found.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))) {
      if (f.path.split("/").some((s) => s.startsWith("."))) continue;
      if (artifactPathProblem(f.path) !== null) {
        this.log.warn(
          { modelId, path: f.path },
          "skipping a file whose name is not a valid artifact path",
        );
        continue;
      }
      const sha256 = known.get(f.path) ?? (await hashFile(join(dir, ...f.path.split("/"))));
      files.push({ path: f.path, bytes: f.bytes, sha256 });
    }
    if (files.length === 0) {
      throw new ServiceError("not_found", `no artifact files under ${dir} for ${modelId}`);
    }
    const manifest = StoreManifestSchema.parse({
      model_id: modelId,
      files,
      total_bytes: files.reduce((s, f) => s + f.bytes, 0),
      registered_at: new Date(this.clock.now()).toISOString(),
      source,
      ...(revision ? { revision } : {}),
    });
    await writeJsonAtomic(join(dir, MANIFEST_FILE), manifest);
    this.manifests.set(modelId, manifest);
    this.log.info({ modelId, files: files.length, totalBytes: manifest.total_bytes }, "registered");
    return manifest;
  }

  // ---- hub downloads ----
  /**
   * Plan, first step of a pull: the hub's listing at the revision asked, the files serving needs (one
   * quantization, a projector, the metadata), what the fill still has to fetch, and the room for it.
   */
  private async downloadPlan(
    hub: HubSource,
    modelId: ModelId,
    options: HubDownloadOptions,
    signal: AbortSignal,
    fail: (
      cause: Extract<HubDownloadResult, { ok: false }>["cause"],
      message: string,
      arithmetic?: NoFitMessageInput,
    ) => HubDownloadResult,
  ) {
    const failed = (...a: Parameters<typeof fail>) => ({ ok: false as const, failure: fail(...a) });
    let listing;
    try {
      listing = await hub.list(modelId, signal, options.revision);
    } catch (e) {
      if (signal.aborted) return failed("aborted", `download of ${modelId} aborted`);
      const at = options.revision ? ` at ${options.revision}` : "";
      return failed("hub_error", `cannot list ${modelId}${at} on the model hub: ${errText(e)}`);
    }
    if (listing.files.length === 0)
      return failed("hub_error", `${modelId} has no artifact files on the model hub`);
    // Only what serving needs: one quantization (its split parts), a projector, the metadata.
    const selection = selectHubFiles(listing.files, { quant: options.quant });
    if (!selection.ok) return failed("hub_error", `${modelId}: ${selection.message}`);
    options.onSelected?.({ quant: selection.quant, servedFile: selection.servedFile });
    const dir = this.modelPath(modelId);
    const files: RecordFile[] = selection.files.map((f) => ({
      path: f.path,
      bytes: f.bytes,
      ...(f.sha256 ? { sha256: f.sha256 } : {}),
      ...(f.gitOid ? { git_oid: f.gitOid } : {}),
    }));
    const prior = await this.priorForDownload(modelId, dir, files);
    const plan = await planFill(dir, files, prior);
    const headroom = this.headroomBytes();
    const space = await this.disk.space(this.opts.storePath);
    if (space.freeBytes < plan.additionalBytes + headroom) {
      const arithmetic: NoFitMessageInput = {
        modelId,
        path: this.opts.storePath,
        manifestBytes: plan.manifestBytes,
        requiredBytes: plan.additionalBytes,
        headroomBytes: headroom,
        freeBytes: space.freeBytes,
        reclaimableBytes: 0,
      };
      return failed("no_fit", noFitMessage(arithmetic), arithmetic);
    }
    return { ok: true as const, listing, dir, files, plan };
  }
  /**
   * Commit, last step of a pull: files the pull did not select go, the model is registered with the
   * hashes the fill verified, and the download record is dropped.
   */
  private async commitPull(
    modelId: ModelId,
    dir: string,
    files: readonly RecordFile[],
    sha256: ReadonlyMap<string, string>,
    revision: string | undefined,
  ): Promise<StoreManifest> {
    // Another quantization pulled before under this id is not served beside this one.
    const stale = await removeStale(
      dir,
      files.map((f) => f.path),
      [DOWNLOAD_RECORD_FILE, MANIFEST_FILE],
    );
    if (stale.length > 0)
      this.log.info({ modelId, removed: stale }, "removed files the pull did not select");
    const known = new Map(sha256);
    const manifest = await this.registerNow(modelId, "hub", known, revision);
    await rm(join(dir, DOWNLOAD_RECORD_FILE), { force: true });
    return manifest;
  }

  private async downloadNow(
    modelId: ModelId,
    options: HubDownloadOptions,
  ): Promise<HubDownloadResult> {
    const fail = (
      cause: Extract<HubDownloadResult, { ok: false }>["cause"],
      message: string,
      arithmetic?: NoFitMessageInput,
    ): HubDownloadResult => {
      this.log.warn({ modelId, cause }, message);
      return {
        ok: false,
        type: "DownloadFailed",
        modelId,
        cause,
        message,
        ...(arithmetic ? { arithmetic } : {}),
      };
    };
    const hub = this.opts.hub;
    if (!hub) return fail("hub_error", "no model hub configured on the store host");
    if (this.state !== "running") return fail("aborted", "store host is not running");
    const controller = new AbortController();
    const onAbort = () => controller.abort(options.signal?.reason);
    if (options.signal?.aborted) onAbort();
    options.signal?.addEventListener("abort", onAbort, { once: true });
    this.controllers.add(controller);
    try {
      const planned = await this.downloadPlan(hub, modelId, options, controller.signal, fail);
      if (!planned.ok) return planned.failure;
      const { listing, dir, files, plan } = planned;
      const record: StagingRecord = {
        version: 1,
        model_id: modelId,
        source: "hub",
        revision: listing.revision,
        files,
        total_bytes: plan.manifestBytes,
        complete: false,
        last_used_ms: this.clock.now(),
      };
      // Files are about to change under the manifest: stop serving until registered again.
      this.manifests.delete(modelId);
      await mkdir(dir, { recursive: true });
      await writeRecord(dir, record, DOWNLOAD_RECORD_FILE);
      options.onProgress?.(plannedTotals(plan));
      const byPath = new Map(listing.files.map((f) => [f.path, f]));
      let stats;
      try {
        stats = await executeFill({
          dir,
          plan,
          signal: controller.signal,
          idleTimeoutMs: this.opts.transferIdleTimeoutMs,
          open: (file) => (offset, s) =>
            hub.open(modelId, byPath.get(file.path) ?? file, offset, s, listing.revision),
          onProgress: options.onProgress,
        });
      } catch (e) {
        if (e instanceof TransferError)
          return fail(e.kind, `hub download of ${modelId} failed: ${e.message}`);
        return fail("transfer", `hub download of ${modelId} failed: ${errText(e)}`);
      }
      const manifest = await this.commitPull(modelId, dir, files, stats.sha256, listing.revision);
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

  /**
   * What is already in the store for a download: an interrupted download's record, or the registered
   * manifest. Small files the hub identifies only by git blob id get that id computed from disk.
   */
  private async priorForDownload(
    modelId: ModelId,
    dir: string,
    wanted: readonly RecordFile[],
  ): Promise<StagingRecord | null> {
    const rec = await readRecord(dir, modelId, DOWNLOAD_RECORD_FILE);
    if (rec.kind === "ok") return rec.record;
    const manifest = this.manifests.get(modelId);
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

  // ---- HTTP ----

  /** Uploads (ic import): files into a hidden area, then one commit moves them into the store. */
  private uploadRoutes(app: Hono): void {
    const uploads = new Uploads({
      storePath: this.opts.storePath,
      disk: this.disk,
      headroomBytes: () => this.headroomBytes(),
      inStore: (id) => this.manifests.has(id),
    });
    const uploadId = (org: string, name: string): ModelId => {
      const parsed = ModelIdSchema.safeParse(`${org}/${name}`);
      if (!parsed.success)
        throw new ServiceError("invalid_request", `invalid model id ${org}/${name}`);
      return parsed.data;
    };
    app.put("/store/uploads/:org/:name/files/*", async (c) => {
      const id = uploadId(c.req.param("org"), c.req.param("name"));
      const skip = routePath(c).split("/").length - 1;
      let relPath: string;
      try {
        relPath = new URL(c.req.url).pathname
          .split("/")
          .slice(skip)
          .map(decodeURIComponent)
          .join("/");
      } catch {
        throw new ServiceError("invalid_request", "malformed file path");
      }
      const length = c.req.header("content-length");
      const file = await uploads.receive(
        id,
        relPath,
        c.req.raw.body,
        length === undefined ? Number.NaN : Number(length),
      );
      return c.json({ model_id: id, file }, 201);
    });
    app.post("/store/uploads/:org/:name/commit", async (c) => {
      const id = uploadId(c.req.param("org"), c.req.param("name"));
      const out = await uploads.commit(id);
      this.log.info({ modelId: id, files: out.files.length }, "upload committed to the store");
      return c.json({ model_id: id, files: out.files });
    });
    app.delete("/store/uploads/:org/:name", async (c) => {
      const id = uploadId(c.req.param("org"), c.req.param("name"));
      if (!(await uploads.abort(id)))
        throw new ServiceError("not_found", `no upload of ${id} in progress`);
      return c.json({ model_id: id, aborted: true });
    });
  }

  private routes(): Hono {
    const app = new Hono();
    app.onError((err, c) => {
      const e =
        err instanceof ServiceError
          ? err
          : new ServiceError("internal", err instanceof Error ? err.message : String(err));
      if (e.code === "internal") this.log.error({ err }, "store host request failed");
      return c.json(errorBody(e), httpStatusFor(e.code));
    });
    app.notFound((c) =>
      c.json(
        errorBody(new ServiceError("not_found", `no route ${c.req.method} ${c.req.path}`)),
        404,
      ),
    );

    app.get("/store/models", (c) => {
      const body: StoreModelList = {
        models: this.models().map((m) => ({
          model_id: m.model_id,
          total_bytes: m.total_bytes,
          files: m.files.length,
        })),
      };
      return c.json(body);
    });

    app.get("/store/models/:org/:name/manifest", (c) => {
      const manifest = this.requireManifest(c.req.param("org"), c.req.param("name"));
      return c.json(manifest);
    });

    this.uploadRoutes(app);
    app.on(["GET", "HEAD"], "/store/models/:org/:name/files/*", async (c) => {
      const manifest = this.requireManifest(c.req.param("org"), c.req.param("name"));
      // The raw segments after .../{org}/{name}/files/, taken by position (org and name may be
      // spelled in any equivalent percent-encoding) and decoded one by one; only a path the
      // manifest names is served.
      const skip = routePath(c).split("/").length - 1;
      const rest = new URL(c.req.url).pathname.split("/").slice(skip);
      let relPath: string;
      try {
        relPath = rest.map(decodeURIComponent).join("/");
      } catch {
        throw new ServiceError("invalid_request", "malformed file path");
      }
      const file = manifest.files.find((f) => f.path === relPath);
      if (!file) throw new ServiceError("not_found", `${manifest.model_id} has no file ${relPath}`);
      return this.serveFile(c.req.raw, manifest.model_id, file);
    });
    return app;
  }

  private requireManifest(org: string, name: string): StoreManifest {
    const parsed = ModelIdSchema.safeParse(`${org}/${name}`);
    if (!parsed.success)
      throw new ServiceError("invalid_request", `invalid model id ${org}/${name}`);
    const manifest = this.manifests.get(parsed.data);
    if (!manifest)
      throw new ServiceError("not_found", `${parsed.data} is not registered in the store`);
    return manifest;
  }

  private async serveFile(req: Request, modelId: ModelId, file: ManifestFile): Promise<Response> {
    const path = artifactFile(this.modelPath(modelId), file.path);
    let size: number;
    try {
      const s = await lstat(path);
      if (!s.isFile()) throw new Error("not a regular file");
      size = s.size;
    } catch (e) {
      throw new ServiceError(
        "conflict",
        `${modelId}/${file.path} is missing from the store: ${errText(e)}`,
      );
    }
    if (size !== file.bytes) {
      throw new ServiceError(
        "conflict",
        `${modelId}/${file.path} has ${size} bytes, its manifest says ${file.bytes}; register the model again`,
      );
    }
    const etag = `"${file.sha256}"`;
    const ifRange = req.headers.get("if-range");
    const rangeHeader =
      ifRange !== null && ifRange !== etag ? undefined : (req.headers.get("range") ?? undefined);
    const range = parseRange(rangeHeader, size);
    const headers = new Headers({
      "content-type": "application/octet-stream",
      "accept-ranges": "bytes",
      etag,
      "x-content-sha256": file.sha256,
    });
    if (range.kind === "unsatisfiable") {
      headers.set("content-range", `bytes */${size}`);
      return new Response(null, { status: 416, headers });
    }
    const [start, end] = range.kind === "partial" ? [range.start, range.end] : [0, size - 1];
    const length = size === 0 ? 0 : end - start + 1;
    headers.set("content-length", String(length));
    if (range.kind === "partial") headers.set("content-range", `bytes ${start}-${end}/${size}`);
    const status = range.kind === "partial" ? 206 : 200;
    this.counters.file_requests++;
    if (range.kind === "partial") this.counters.range_requests++;
    if (req.method === "HEAD" || length === 0) return new Response(null, { status, headers });
    this.counters.open_bodies++;
    const body = fileBody(
      path,
      start,
      end,
      (n) => {
        this.counters.bytes_served += n;
      },
      () => {
        this.counters.open_bodies--;
      },
    );
    return new Response(body, { status, headers });
  }
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

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
