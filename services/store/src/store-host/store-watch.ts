// Models copied into or removed from store_path while the node runs. fs.watch on store_path starts a
// scan (debounced) when a model directory appears, is renamed or goes; a periodic scan is the safety
// net for filesystems whose events do not arrive (NFS, some bind mounts). A directory with no
// manifest yet is registered once its files have stopped changing, so one still being copied is
// never registered half-way; while one is pending, scans follow up on their own until it settles.
// A directory with a hub download's progress record (a pull in progress or cancelled) is the pull's,
// not the watch's. A registered model whose directory is gone (removed by hand) is reported.
//
// Invariants: a directory is admitted only after two scans at least `settleMs` apart saw the same
// files (hidden ones included: copy tools write into dotfiles first) with the same sizes and
// modification times, its newest file is at least `settleMs` old, and it has a non-hidden file. A
// scan never waits for a hash: admitting hands a directory without a manifest to the store host's
// hashing pool. A directory known bad (its files differ from its manifest, or registering it
// failed) is left alone until its signature changes.
import { watch } from "node:fs";
import type { FSWatcher } from "node:fs";
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { modelDirName, modelIdFromDirName } from "@ic/protocol";
import type { ModelId } from "@ic/protocol";
import type { Logger } from "@ic/log";
import { walkFiles, type TreeFile } from "../paths.ts";

/** What one scan saw of a directory: its files with sizes and modification times. */
export interface DirSnapshot {
  /** `path:bytes:mtime` of every file, sorted; equal signatures mean nothing changed. */
  readonly signature: string;
  /** When it was taken. */
  readonly atMs: number;
  readonly newestMtimeMs: number;
  /** Non-hidden files (what registering would take). */
  readonly files: number;
  readonly hasDownloadRecord: boolean;
}

/** `path:bytes:mtime` of every file (hidden ones included), sorted: what a snapshot compares. Pure. */
export function dirSignature(files: readonly TreeFile[]): string {
  return files
    .map((f) => `${f.path}:${f.bytes}:${f.mtimeMs}`)
    .sort()
    .join("|");
}

/** Whether a directory may be registered now, given this scan and the one before. Pure. */
export function settled(
  previous: DirSnapshot | undefined,
  current: DirSnapshot,
  settleMs: number,
): boolean {
  return (
    previous !== undefined &&
    !current.hasDownloadRecord &&
    current.files > 0 &&
    previous.signature === current.signature &&
    current.atMs - previous.atMs >= settleMs &&
    current.atMs - current.newestMtimeMs >= settleMs
  );
}

/**
 * When to look again at a directory that did not settle in this scan (ms from now), or undefined
 * when only the periodic scan should (a pull's directory, or an empty one). Pure.
 */
export function followUpMs(
  previous: DirSnapshot | undefined,
  current: DirSnapshot,
  settleMs: number,
): number | undefined {
  if (current.hasDownloadRecord || current.files === 0) return undefined;
  const sameAsBefore = previous !== undefined && previous.signature === current.signature;
  // Changed since the last look (or first sight): a full settle period from this look.
  if (!sameAsBefore) return settleMs;
  const sinceLook = settleMs - (current.atMs - previous.atMs);
  const sinceWrite = settleMs - (current.atMs - current.newestMtimeMs);
  return Math.max(MIN_FOLLOW_UP_MS, sinceLook, sinceWrite);
}

const MIN_FOLLOW_UP_MS = 200;

/** What a scan does with a model directory that serves nothing yet. */
export type DirAction =
  /** Known bad with these very files, or being hashed: nothing until that changes. */
  | { readonly kind: "leave" }
  /** Not settled: look again in `followUpMs` (undefined: at the periodic scan). */
  | { readonly kind: "wait"; readonly followUpMs: number | undefined }
  /** Settled: hand it to the store host (a size check, or the hashing pool). */
  | { readonly kind: "admit" };

/** The decision for one unserved directory, given what the watch knows of it. Pure. */
export function dirAction(d: {
  readonly previous: DirSnapshot | undefined;
  readonly current: DirSnapshot;
  readonly settleMs: number;
  /** The store host's hashing pool has it. */
  readonly hashing: boolean;
  /** The signature it had when found bad (files differ from the manifest, or it failed). */
  readonly badSignature: string | undefined;
}): DirAction {
  if (d.hashing || d.badSignature === d.current.signature) return { kind: "leave" };
  if (settled(d.previous, d.current, d.settleMs)) return { kind: "admit" };
  return { kind: "wait", followUpMs: followUpMs(d.previous, d.current, d.settleMs) };
}

/**
 * What the store host did with an admitted directory: serves it (its manifest matched), reports it
 * (its files differ from its manifest), or hashes it in the background (`done` settles then).
 */
export type Admission =
  | { readonly kind: "served" }
  | { readonly kind: "changed" }
  | { readonly kind: "hashing"; readonly done: Promise<unknown> };

/** A top-level entry of store_path the store does not serve, and what to do with it. */
export interface LooseEntry {
  readonly name: string;
  readonly hint: string;
}

/**
 * Entries at the top of store_path that are not served: files (a `.gguf` dropped there) and
 * folders not named `<org>--<name>`. Hidden entries (the upload area, temp files) are the store's
 * own. Pure.
 */
export function looseEntries(entries: readonly { name: string; dir: boolean }[]): LooseEntry[] {
  const out: LooseEntry[] = [];
  for (const e of entries) {
    if (e.name.startsWith(".")) continue;
    if (!e.dir) {
      const stem = e.name.replace(/\.gguf$/i, "").replace(/[^A-Za-z0-9._-]+/g, "-");
      out.push({
        name: e.name,
        hint: `a file at the top of store_path is not a model: move it into a folder <org>--<name>/ (e.g. local--${stem}/${e.name}), or ic import it`,
      });
    } else if (modelIdFromDirName(e.name) === null) {
      out.push({
        name: e.name,
        hint: "a model folder must be named <org>--<name> (letters, digits, '.', '_', '-'): rename it",
      });
    }
  }
  return out;
}

export interface StoreWatchOptions {
  readonly storePath: string;
  /** Whether the store already serves this model (it has a valid manifest). */
  readonly registered: (id: ModelId) => boolean;
  /** Serves the model when its manifest matches its files, else reports it or queues its hash. */
  readonly admit: (id: ModelId) => Promise<Admission>;
  /**
   * Checks a served model's files against its manifest (sizes): "changed" withdraws it (reported
   * from then on), "gone" when its directory went.
   */
  readonly verify?: (id: ModelId) => Promise<"ok" | "changed" | "gone">;
  /** The signature of a directory the store host found changed (left alone until it differs). */
  readonly badSignature?: (id: ModelId) => string | undefined;
  /** A model was added: the node registers it in the cluster. */
  readonly onAdded: (id: ModelId) => void;
  /** The registered models (to notice one whose directory disappeared). */
  readonly registeredIds?: () => readonly ModelId[];
  /** A registered model's directory is gone. */
  readonly onRemoved?: (id: ModelId) => void;
  /** A model directory the watch saw and left unserved is gone (or is served by now). */
  readonly onUnservedGone?: (id: ModelId) => void;
  /** After each scan: what lies at the top of store_path unserved (empty when nothing). */
  readonly onLoose?: (loose: LooseEntry[]) => void;
  readonly log: Logger;
  /** The safety-net scan's period (default 15 s). */
  readonly intervalMs?: number;
  /** How long a directory's files must stay unchanged before it is registered (default 3 s). */
  readonly settleMs?: number;
  /** Scans wait this long after a filesystem event, so a burst of events makes one scan. */
  readonly debounceMs?: number;
  /** Whether to watch store_path for events (default true); the periodic scan runs either way. */
  readonly useFsWatch?: boolean;
  readonly now?: () => number;
}

const DOWNLOAD_RECORD = ".ic-download.json";

export class StoreWatch {
  private readonly seen = new Map<string, DirSnapshot>();
  /** Directories whose registration failed, with what they held then: tried again once that changes. */
  private readonly failed = new Map<string, string>();
  /** Directories the store host's hashing pool has (admitted, not done). */
  private readonly hashing = new Set<string>();
  /** The unserved model directories the last scan saw (to notice one that goes). */
  private unserved = new Map<string, ModelId>();
  private timer: NodeJS.Timeout | undefined;
  private soon: { timer: NodeJS.Timeout; at: number } | undefined;
  private watcher: FSWatcher | undefined;
  private scanning: Promise<void> | undefined;
  /** An event or follow-up came while a scan ran: scan again when it ends. */
  private again = false;
  private stopped = false;

  constructor(private readonly o: StoreWatchOptions) {}

  private get now(): number {
    return (this.o.now ?? Date.now)();
  }

  start(): void {
    this.timer = setInterval(() => void this.scanOnce(), this.o.intervalMs ?? 15_000);
    if (this.o.useFsWatch ?? true) {
      try {
        this.watcher = watch(this.o.storePath, { persistent: false }, () =>
          this.schedule(this.o.debounceMs ?? 300),
        );
        this.watcher.on("error", (e) => {
          this.o.log.warn({ err: e }, "watching store_path failed; the periodic scan goes on");
          this.watcher?.close();
          this.watcher = undefined;
        });
      } catch (e) {
        this.o.log.warn({ err: e }, "cannot watch store_path; relying on the periodic scan");
      }
    }
    this.schedule(0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    if (this.soon) clearTimeout(this.soon.timer);
    this.soon = undefined;
    this.watcher?.close();
    this.watcher = undefined;
    await this.scanning;
  }

  /** One scan (joined, not doubled, while the previous one still runs). */
  scanOnce(): Promise<void> {
    if (this.scanning) {
      this.again = true;
      return this.scanning;
    }
    this.scanning = this.scan()
      .catch((e: unknown) => this.o.log.warn({ err: e }, "store scan failed"))
      .finally(() => {
        this.scanning = undefined;
        if (this.again && !this.stopped) {
          this.again = false;
          this.schedule(0);
        }
      });
    return this.scanning;
  }

  /** A scan in `ms` unless one is due sooner already. */
  private schedule(ms: number): void {
    if (this.stopped) return;
    const at = this.now + ms;
    if (this.soon && this.soon.at <= at) return;
    if (this.soon) clearTimeout(this.soon.timer);
    const timer = setTimeout(() => {
      this.soon = undefined;
      void this.scanOnce();
    }, ms);
    timer.unref();
    this.soon = { timer, at };
  }

  private async scan(): Promise<void> {
    const settleMs = this.o.settleMs ?? 3000;
    const entries = await readdir(this.o.storePath, { withFileTypes: true }).catch(() => []);
    this.o.onLoose?.(looseEntries(entries.map((e) => ({ name: e.name, dir: e.isDirectory() }))));
    const present = new Map<string, ModelId>();
    let followUp: number | undefined;
    for (const { name } of entries) {
      const id = modelIdFromDirName(name);
      if (!id) continue;
      const dir = join(this.o.storePath, name);
      if (!(await stat(dir).catch(() => undefined))?.isDirectory()) continue;
      // A served model: a cheap size check against its manifest; it is looked at as unserved once
      // it differs (its report stands until its files change again).
      if (this.o.registered(id) && (await this.o.verify?.(id)) !== "changed") continue;
      present.set(name, id);
      const current = snapshot(await walkFiles(dir), this.now);
      if (this.failed.get(name) !== current.signature) this.failed.delete(name);
      const previous = this.seen.get(name);
      const action = dirAction({
        previous,
        current,
        settleMs,
        hashing: this.hashing.has(name),
        badSignature: this.failed.get(name) ?? this.o.badSignature?.(id),
      });
      if (action.kind === "wait") {
        // Keep the earlier look while nothing changed, so the settle period counts from it.
        if (previous?.signature !== current.signature) this.seen.set(name, current);
        const next = action.followUpMs;
        if (next !== undefined) followUp = Math.min(followUp ?? next, next);
      } else if (action.kind === "admit") {
        this.seen.delete(name);
        await this.admit(id, name, current);
      }
    }
    for (const m of [this.seen, this.failed])
      for (const name of m.keys()) if (!present.has(name)) m.delete(name);
    await this.noticeGone(present);
    if (followUp !== undefined) this.schedule(followUp);
  }

  /** Hands a settled directory to the store host; a hash goes on in the background. */
  private async admit(id: ModelId, name: string, current: DirSnapshot): Promise<void> {
    const failed = (e: unknown) => {
      this.failed.set(name, current.signature);
      this.o.log.warn(
        { err: e, modelId: id },
        "registering a model found in store_path failed; tried again once its files change",
      );
    };
    let a: Admission;
    try {
      a = await this.o.admit(id);
    } catch (e) {
      failed(e);
      return;
    }
    const added = () => {
      this.o.log.info({ modelId: id, files: current.files }, "model found in store_path");
      this.o.onAdded(id);
    };
    if (a.kind === "served") added();
    if (a.kind !== "hashing") return;
    this.hashing.add(name);
    a.done.then(
      () => {
        this.hashing.delete(name);
        added();
      },
      (e: unknown) => {
        this.hashing.delete(name);
        if (!this.stopped) failed(e);
      },
    );
  }

  /** Registered models whose directory is gone, and unserved ones that went since the last scan. */
  private async noticeGone(present: ReadonlyMap<string, ModelId>): Promise<void> {
    for (const id of this.o.registeredIds?.() ?? []) {
      const dir = join(this.o.storePath, modelDirName(id));
      if (!(await stat(dir).catch(() => undefined))) this.o.onRemoved?.(id);
    }
    for (const [name, id] of this.unserved) {
      if (present.has(name)) continue;
      // Gone from the unserved ones because it is served by now, or because its directory went.
      if (!(await stat(join(this.o.storePath, name)).catch(() => undefined)))
        this.o.onUnservedGone?.(id);
    }
    this.unserved = new Map(present);
  }
}

/** What one scan saw of a directory's files. */
function snapshot(files: readonly TreeFile[], atMs: number): DirSnapshot {
  return {
    signature: dirSignature(files),
    atMs,
    newestMtimeMs: Math.max(0, ...files.map((f) => f.mtimeMs)),
    files: files.filter((f) => !f.path.split("/").some((s) => s.startsWith("."))).length,
    hasDownloadRecord: files.some((f) => f.path === DOWNLOAD_RECORD),
  };
}
