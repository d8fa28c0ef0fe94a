// Model pulls: store-side downloads of whole models from the model hub, started by an operator
// (POST /store/pulls on any node, forwarded to the store host over the bus). One pull runs at a time,
// in the order asked; each goes through StoreHost.downloadFromHub, so rule 7 holds: the exact selected
// manifest is admitted against the store volume's reserve before anything is written, serialized
// with the transfer.
//
// Invariants: at most one entry per model; a cancelled pull keeps its partial files (.part), so
// asking again resumes it; a live pull is never restarted at another revision (conflict); finished
// entries are kept for an hour (at most KEEP_FINISHED), so an operator sees how a pull ended.
import { ServiceError } from "@ic/protocol";
import type { ModelId, Pull } from "@ic/protocol";
import type { HubDownloadOptions, HubDownloadResult } from "./pull-plan.ts";

/** What a pull needs of the store host. */
export interface PullTarget {
  downloadFromHub(modelId: ModelId, options: HubDownloadOptions): Promise<HubDownloadResult>;
}

/** The revision a pull takes when none is asked for: the hub's default branch. */
export const DEFAULT_REVISION = "main";

export interface PullManagerOptions {
  readonly target: PullTarget;
  /** A pull finished with its model registered in the store (the node then registers it in the cluster). */
  readonly onDone?: (modelId: ModelId) => void;
  /**
   * The models a pulled one names as its companions (its model.json's drafter or MTP sidecar) that
   * the store does not have: each is pulled next, as a pull of its own.
   */
  readonly missingCompanions?: (modelId: ModelId) => Promise<ModelId[]>;
  readonly now?: () => number;
}

const KEEP_FINISHED = 50;
const KEEP_FINISHED_MS = 60 * 60 * 1000;

interface Entry {
  pull: Pull;
  /** The quantization asked for (the pull shows the chosen one once listed). */
  quant?: string;
  controller?: AbortController;
  finishedAt?: number;
}

export class PullManager {
  private readonly entries = new Map<ModelId, Entry>();
  private readonly queue: ModelId[] = [];
  private running: ModelId | undefined;
  private stopped = false;
  private readonly now: () => number;

  constructor(private readonly o: PullManagerOptions) {
    this.now = o.now ?? Date.now;
  }

  /**
   * Starts a pull of `modelId`, or resumes a cancelled or failed one (from its partial files); a
   * live one is returned as is (`created: false`), or refused with `conflict` when it pulls another
   * revision or quantization than the one asked for.
   */
  start(modelId: ModelId, revision?: string, quant?: string): { pull: Pull; created: boolean } {
    const live = this.entries.get(modelId);
    if (live && (live.pull.state === "queued" || live.pull.state === "running")) {
      if (revision !== undefined && revision !== live.pull.revision)
        throw new ServiceError(
          "conflict",
          `a pull of ${modelId} at ${live.pull.revision} is ${live.pull.state}; cancel it first to pull ${revision}`,
        );
      if (quant !== undefined && quant.toLowerCase() !== live.quant?.toLowerCase())
        throw new ServiceError(
          "conflict",
          `a pull of ${modelId}${live.quant ? ` (${live.quant})` : ""} is ${live.pull.state}; cancel it first to pull ${quant}`,
        );
      return { pull: live.pull, created: false };
    }
    if (this.stopped) throw new ServiceError("unavailable", "the store host is stopping");
    const at = new Date(this.now()).toISOString();
    // Posting again resumes a cancelled or failed pull at its revision unless another is asked for.
    const resumable = live?.pull.state === "cancelled" || live?.pull.state === "failed";
    const rev = revision ?? (resumable ? live.pull.revision : DEFAULT_REVISION);
    const q = quant ?? (resumable ? live.quant : undefined);
    const same = resumable && live.pull.revision === rev && live.quant === q;
    const entry: Entry = {
      pull: {
        model_id: modelId,
        revision: rev,
        ...(q !== undefined ? { quant: q } : {}),
        state: "queued",
        // A resume starts from what the last attempt had (the first report corrects it).
        bytes_done: same ? live.pull.bytes_done : 0,
        bytes_total: same ? live.pull.bytes_total : null,
        files_done: same ? live.pull.files_done : 0,
        files_total: same ? live.pull.files_total : null,
        started_at: at,
        updated_at: at,
      },
      ...(q !== undefined ? { quant: q } : {}),
    };
    this.entries.set(modelId, entry);
    this.queue.push(modelId);
    this.next();
    return { pull: entry.pull, created: true };
  }

  /**
   * Cancels a queued or running pull (its partial files stay for a resume); a finished one (done,
   * failed or cancelled) is dismissed: taken off the list, its partial files kept. Undefined when
   * unknown.
   */
  cancel(modelId: ModelId): { pull: Pull; dismissed: boolean } | undefined {
    const e = this.entries.get(modelId);
    if (!e) return undefined;
    if (e.finishedAt !== undefined) {
      this.entries.delete(modelId);
      return { pull: e.pull, dismissed: true };
    }
    if (e.pull.state === "queued") {
      this.queue.splice(this.queue.indexOf(modelId), 1);
      this.finish(e, { state: "cancelled" });
    } else if (e.pull.state === "running") {
      e.controller?.abort(new Error("cancelled by the operator"));
      // The download settles as aborted; the state says so at once.
      this.update(e, { state: "cancelled" });
    }
    return { pull: e.pull, dismissed: false };
  }

  /** Live pulls first (in order), then the finished ones, newest first. */
  list(): Pull[] {
    this.prune();
    const all = [...this.entries.values()];
    const live = all.filter((e) => e.finishedAt === undefined).map((e) => e.pull);
    const done = all
      .filter((e) => e.finishedAt !== undefined)
      .sort((a, b) => b.finishedAt! - a.finishedAt!)
      .map((e) => e.pull);
    return [...live, ...done];
  }

  /** Stops the running pull (its partial stays) and drops the queue. */
  stop(): void {
    this.stopped = true;
    for (const id of this.queue.splice(0)) {
      const e = this.entries.get(id);
      if (e) this.finish(e, { state: "cancelled" });
    }
    if (this.running) this.entries.get(this.running)?.controller?.abort(new Error("node stopping"));
  }

  private next(): void {
    if (this.running !== undefined || this.stopped) return;
    const id = this.queue.shift();
    if (id === undefined) return;
    const e = this.entries.get(id)!;
    this.running = id;
    e.controller = new AbortController();
    this.update(e, { state: "running" });
    void this.o.target
      .downloadFromHub(id, {
        signal: e.controller.signal,
        revision: e.pull.revision,
        quant: e.quant,
        onSelected: (sel) =>
          this.update(e, {
            ...(sel.quant !== null ? { quant: sel.quant } : {}),
            ...(sel.servedFile !== null ? { served_file: sel.servedFile } : {}),
          }),
        onProgress: (p) =>
          this.update(e, {
            bytes_done: p.doneBytes,
            bytes_total: p.totalBytes,
            files_done: p.filesDone,
            files_total: p.filesTotal,
          }),
      })
      .then(
        (r) => this.settle(e, r),
        (err: unknown) =>
          this.settle(e, {
            ok: false,
            type: "DownloadFailed",
            modelId: id,
            cause: "transfer",
            message: err instanceof Error ? err.message : String(err),
          }),
      )
      .finally(() => {
        this.running = undefined;
        this.next();
      });
  }

  private settle(e: Entry, r: HubDownloadResult): void {
    if (r.ok) {
      const total = r.manifest.total_bytes;
      const files = r.manifest.files.length;
      this.finish(e, {
        state: "done",
        bytes_done: total,
        bytes_total: total,
        files_done: files,
        files_total: files,
      });
      this.o.onDone?.(e.pull.model_id);
      void this.pullCompanions(e.pull.model_id);
      return;
    }
    if (e.controller?.signal.aborted || r.cause === "aborted") {
      this.finish(e, { state: "cancelled" });
      return;
    }
    this.finish(e, { state: "failed", error: { code: r.cause, message: r.message } });
  }

  /** Queues pulls of the companions a finished pull named (never throws: each is a pull of its own). */
  private async pullCompanions(modelId: ModelId): Promise<void> {
    let ids: ModelId[];
    try {
      ids = (await this.o.missingCompanions?.(modelId)) ?? [];
    } catch {
      return;
    }
    for (const id of ids) {
      const live = this.entries.get(id)?.pull.state;
      if (live === "queued" || live === "running" || this.stopped) continue;
      this.start(id);
    }
  }

  private update(e: Entry, patch: Partial<Pull>): void {
    // A cancelled pull stays cancelled while its download winds down.
    const state = e.pull.state === "cancelled" ? "cancelled" : (patch.state ?? e.pull.state);
    e.pull = { ...e.pull, ...patch, state, updated_at: new Date(this.now()).toISOString() };
  }

  private finish(e: Entry, patch: Partial<Pull>): void {
    e.pull = { ...e.pull, ...patch, updated_at: new Date(this.now()).toISOString() };
    delete e.controller;
    e.finishedAt = this.now();
  }

  private prune(): void {
    const finished = [...this.entries.values()]
      .filter((e) => e.finishedAt !== undefined)
      .sort((a, b) => b.finishedAt! - a.finishedAt!);
    finished.forEach((e, i) => {
      if (i >= KEEP_FINISHED || this.now() - e.finishedAt! > KEEP_FINISHED_MS)
        this.entries.delete(e.pull.model_id);
    });
  }
}
