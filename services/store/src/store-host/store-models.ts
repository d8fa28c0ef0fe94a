// Which models the store host serves: those whose manifest matches their files (served at once),
// those whose files differ from it (reported, never hashed in a loop), and the hashing pool.
//
// Invariants: nothing here waits for a hash to serve a model with a valid manifest; a directory
// without a manifest and an old manifest's piece hashes go through the one bounded pool; a model
// whose files differ from its manifest is neither served nor hashed again until its directory's
// signature (paths, sizes, mtimes) changes; no manifest is written into a directory that has gone.
import { stat } from "node:fs/promises";
import type { Logger } from "@ic/log";
import type { Clock, ModelId, StoreManifest } from "@ic/protocol";
import { modelDir, walkFiles } from "../paths.ts";
import { errText } from "../transfer/transfer.ts";
import { HashPool, type HashJobContext, type HashJobProgress } from "./hash-pool.ts";
import {
  artifactBytes,
  bytesLackingPieces,
  checkManifest,
  fileDifferences,
  lacksPieces,
  readManifests,
  saveManifest,
  withPieces,
  writeManifest,
  type FileDifference,
} from "./manifests.ts";
import { dirSignature, type Admission } from "./store-watch.ts";

/** A model whose files differ from its manifest: reported, not served, until its files change. */
export interface ChangedModel {
  readonly model_id: ModelId;
  readonly dir: string;
  readonly differences: readonly FileDifference[];
  /** The directory's signature when found so (store-watch.ts dirSignature). */
  readonly signature: string;
}

export interface StoreModelsOptions {
  readonly storePath: string;
  readonly log: Logger;
  readonly clock: Pick<Clock, "now">;
  readonly pieceBytes?: number | undefined;
  /** Hashing jobs at once (default 1). */
  readonly hashConcurrency?: number | undefined;
  /** The served models changed (one added by a hash, one found changed). */
  readonly onChange?: (() => void) | undefined;
  /** A served model stopped being served: its files were found to differ from its manifest. */
  readonly onWithdrawn?: ((id: ModelId) => void) | undefined;
}

export class StoreModels {
  /** The served models, by id. */
  readonly served = new Map<ModelId, StoreManifest>();
  private readonly changed = new Map<ModelId, ChangedModel>();
  private readonly pool: HashPool;

  constructor(private readonly o: StoreModelsOptions) {
    this.pool = new HashPool({
      log: o.log,
      concurrency: o.hashConcurrency,
      now: () => o.clock.now(),
    });
  }

  /**
   * At start: serves every model whose manifest matches (old manifests get piece hashes in the
   * pool) and reports those whose files differ. A directory without a (valid) manifest is the
   * watch's: admitted once its files have settled, so a copy in progress at start is not hashed
   * half-way.
   */
  async load(): Promise<void> {
    for (const [id, check] of await readManifests(this.o.storePath, this.o.log)) {
      if (check.kind === "ok") this.serve(id, check.manifest);
      else if (check.kind === "changed") await this.markChanged(id, check.differences);
    }
  }

  /**
   * A directory the watch found settled: served when its manifest matches its files (sizes),
   * reported when they differ, else queued for hashing (never awaited here).
   */
  async admit(id: ModelId): Promise<Admission> {
    if (this.served.has(id)) return { kind: "served" };
    const check = await checkManifest(this.dir(id), id);
    if (check.kind === "ok") {
      this.serve(id, check.manifest);
      this.o.onChange?.();
      return { kind: "served" };
    }
    if (check.kind === "changed") {
      await this.markChanged(id, check.differences);
      return { kind: "changed" };
    }
    this.changed.delete(id);
    return { kind: "hashing", done: this.register(id) };
  }

  /** Hashes every non-dot file of the model's directory in the pool and serves its new manifest. */
  async register(id: ModelId): Promise<StoreManifest> {
    const dir = this.dir(id);
    const totalBytes = await artifactBytes(dir);
    return this.pool.add({
      id,
      kind: "register",
      totalBytes,
      run: async (ctx) => {
        const manifest = await writeManifest({
          dir,
          modelId: id,
          source: "local",
          known: new Map(),
          revision: undefined,
          nowMs: this.o.clock.now(),
          log: this.o.log,
          pieceBytes: this.o.pieceBytes,
          signal: ctx.signal,
          onProgress: ctx.onProgress,
          checkpoint: ctx.checkpoint,
        });
        ctx.signal.throwIfAborted();
        this.changed.delete(id);
        this.served.set(id, manifest);
        this.o.onChange?.();
        return manifest;
      },
    });
  }

  /** Serves a manifest (one just loaded, checked or written); an old one gets piece hashes after. */
  serve(id: ModelId, manifest: StoreManifest): void {
    this.changed.delete(id);
    this.served.set(id, manifest);
    if (!lacksPieces(manifest)) return;
    this.pool
      .add({
        id,
        kind: "pieces",
        totalBytes: bytesLackingPieces(manifest),
        run: (ctx) => this.addPieces(id, ctx),
      })
      .catch((e: unknown) =>
        this.o.log.warn(
          { modelId: id, err: errText(e) },
          "could not add piece hashes; the files are served whole",
        ),
      );
  }

  /**
   * A served model's files against its manifest (sizes only, each scan): one that differs is
   * withdrawn and reported; "gone" when its directory went (the caller deregisters it).
   */
  async verify(id: ModelId): Promise<"ok" | "changed" | "gone"> {
    const m = this.served.get(id);
    if (!m) return "ok";
    const dir = this.dir(id);
    const differences = await fileDifferences(dir, m.files);
    if (differences.length === 0 || this.served.get(id) !== m) return "ok";
    if (!(await isDirectory(dir))) return "gone";
    this.pool.cancel(id, "its files changed");
    this.served.delete(id);
    await this.markChanged(id, differences);
    this.o.onChange?.();
    this.o.onWithdrawn?.(id);
    return "changed";
  }

  /** Stops serving or reporting a model and aborts its hashing (its directory went, or a pull). */
  forget(id: ModelId, reason: string): boolean {
    this.pool.cancel(id, reason);
    this.changed.delete(id);
    return this.served.delete(id);
  }

  /** The signature of a model's directory when its files were found to differ from its manifest. */
  changedSignature(id: ModelId): string | undefined {
    return this.changed.get(id)?.signature;
  }

  changedModels(): ChangedModel[] {
    return [...this.changed.values()].sort((a, b) => (a.model_id < b.model_id ? -1 : 1));
  }

  hashing(): HashJobProgress[] {
    return this.pool.progress();
  }

  /** Aborts the running hashes (their read loops stop at once) and drops the queued ones. */
  stop(): Promise<void> {
    return this.pool.stop();
  }

  /** Adds piece hashes to a served manifest; a file whose sha256 differs withdraws the model. */
  private async addPieces(id: ModelId, ctx: HashJobContext): Promise<void> {
    const m = this.served.get(id);
    if (!m || !lacksPieces(m)) return;
    const dir = this.dir(id);
    const r = await withPieces(dir, m, { ...ctx, pieceBytes: this.o.pieceBytes });
    ctx.signal.throwIfAborted();
    if (this.served.get(id) !== m) return;
    if (!r.ok) {
      this.served.delete(id);
      if (!(await isDirectory(dir))) return;
      await this.markChanged(id, [r.difference]);
      this.o.onChange?.();
      this.o.onWithdrawn?.(id);
      return;
    }
    await saveManifest(dir, r.manifest, ctx.signal);
    if (this.served.get(id) !== m) return;
    this.served.set(id, r.manifest);
    this.o.log.info({ modelId: id }, "added piece hashes to the manifest");
  }

  /** Reports a model whose files differ from its manifest, remembering its directory's signature. */
  private async markChanged(id: ModelId, differences: readonly FileDifference[]): Promise<void> {
    const dir = this.dir(id);
    const signature = dirSignature(await walkFiles(dir));
    const before = this.changed.get(id);
    this.changed.set(id, { model_id: id, dir, differences, signature });
    const first = differences[0];
    const was = before?.differences[0];
    if (was?.file !== first?.file || was?.problem !== first?.problem)
      this.o.log.warn(
        { modelId: id, file: first?.file, problem: first?.problem, files: differences.length },
        "store files differ from their manifest; not served nor registered until they change",
      );
  }

  private dir(id: ModelId): string {
    return modelDir(this.o.storePath, id);
  }
}

async function isDirectory(path: string): Promise<boolean> {
  return (await stat(path).catch(() => undefined))?.isDirectory() ?? false;
}
