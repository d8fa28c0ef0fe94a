// Models copied into store_path while the node runs: a periodic scan finds model directories
// (`<org>--<name>`) that have no manifest yet and registers each once its files have stopped changing,
// so a directory still being copied is never registered half-way. A directory with a hub download's
// progress record (a pull in progress or cancelled) is the pull's, not the watch's. A registered
// model whose directory is gone (removed by hand) is reported, so the node can take it out.
//
// Invariants: a directory is registered only after two scans at least `settleMs` apart saw the same
// files with the same sizes and modification times, and its newest file is at least `settleMs` old.
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { modelDirName, modelIdFromDirName } from "@ic/protocol";
import type { ModelId } from "@ic/protocol";
import type { Logger } from "@ic/log";
import { walkFiles } from "./paths.ts";

/** What one scan saw of a directory: its files with sizes and modification times. */
export interface DirSnapshot {
  /** `path:bytes:mtime` of every file, sorted; equal signatures mean nothing changed. */
  readonly signature: string;
  readonly newestMtimeMs: number;
  readonly files: number;
  readonly hasDownloadRecord: boolean;
}

/** Whether a directory may be registered now, given this scan and the one before. Pure. */
export function settled(
  previous: DirSnapshot | undefined,
  current: DirSnapshot,
  nowMs: number,
  settleMs: number,
): boolean {
  return (
    previous !== undefined &&
    !current.hasDownloadRecord &&
    current.files > 0 &&
    previous.signature === current.signature &&
    nowMs - current.newestMtimeMs >= settleMs
  );
}

export interface StoreWatchOptions {
  readonly storePath: string;
  /** Whether the store already serves this model (it has a valid manifest). */
  readonly registered: (id: ModelId) => boolean;
  /** Registers the model (hashes its files, writes its manifest). */
  readonly register: (id: ModelId) => Promise<unknown>;
  /** A model was added: the node registers it in the cluster. */
  readonly onAdded: (id: ModelId) => void;
  /** The registered models (to notice one whose directory disappeared). */
  readonly registeredIds?: () => readonly ModelId[];
  /** A registered model's directory is gone. */
  readonly onRemoved?: (id: ModelId) => void;
  readonly log: Logger;
  readonly intervalMs?: number;
  readonly settleMs?: number;
  readonly now?: () => number;
}

const DOWNLOAD_RECORD = ".ic-download.json";

export class StoreWatch {
  private readonly seen = new Map<string, DirSnapshot>();
  private timer: NodeJS.Timeout | undefined;
  private scanning: Promise<void> | undefined;

  constructor(private readonly o: StoreWatchOptions) {}

  start(): void {
    this.timer = setInterval(() => void this.scanOnce(), this.o.intervalMs ?? 5000);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.scanning;
  }

  /** One scan (skipped while the previous one still runs). */
  scanOnce(): Promise<void> {
    this.scanning ??= this.scan()
      .catch((e: unknown) => this.o.log.warn({ err: e }, "store scan failed"))
      .finally(() => (this.scanning = undefined));
    return this.scanning;
  }

  private async scan(): Promise<void> {
    const now = (this.o.now ?? Date.now)();
    const settleMs = this.o.settleMs ?? 3000;
    const names = await readdir(this.o.storePath).catch(() => [] as string[]);
    const present = new Set<string>();
    for (const name of names) {
      const id = modelIdFromDirName(name);
      if (!id || this.o.registered(id)) continue;
      const dir = join(this.o.storePath, name);
      if (!(await stat(dir).catch(() => undefined))?.isDirectory()) continue;
      present.add(name);
      const files = await walkFiles(dir);
      const visible = files.filter((f) => !f.path.split("/").some((s) => s.startsWith(".")));
      const current: DirSnapshot = {
        signature: visible
          .map((f) => `${f.path}:${f.bytes}:${f.mtimeMs}`)
          .sort()
          .join("|"),
        newestMtimeMs: Math.max(0, ...visible.map((f) => f.mtimeMs)),
        files: visible.length,
        hasDownloadRecord: files.some((f) => f.path === DOWNLOAD_RECORD),
      };
      const previous = this.seen.get(name);
      this.seen.set(name, current);
      if (!settled(previous, current, now, settleMs)) continue;
      try {
        await this.o.register(id);
        this.seen.delete(name);
        this.o.log.info({ modelId: id, files: current.files }, "model found in store_path");
        this.o.onAdded(id);
      } catch (e) {
        this.o.log.warn({ err: e, modelId: id }, "registering a model found in store_path failed");
      }
    }
    for (const name of this.seen.keys()) if (!present.has(name)) this.seen.delete(name);
    for (const id of this.o.registeredIds?.() ?? []) {
      const dir = join(this.o.storePath, modelDirName(id));
      if (!(await stat(dir).catch(() => undefined))) this.o.onRemoved?.(id);
    }
  }
}
