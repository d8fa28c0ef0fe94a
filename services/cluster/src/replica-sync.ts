// Replica catch-up in bounded pages: the master answers each sync request with consecutive events
// under a byte budget, or with one part of a snapshot of its state; the follower asks again until it
// reaches the master's index. No reply grows with the cluster's age or traffic: the budget sits well
// below the bus's max_payload, and a snapshot of any size travels in parts of that budget.
import {
  ControlStateSchema,
  type ControlState,
  type SnapshotPart,
  type SyncReply,
  type SyncRequest,
} from "@ic/protocol";
import type { MasterLog } from "./master-log.ts";

/** Bytes a reply's envelope may add around its events or snapshot part. */
const ENVELOPE_BYTES = 512;

/** Default page budget: a quarter of the bus's max_payload, at most 256 KiB. */
export function defaultSyncBudget(maxPayload: number): number {
  return Math.max(4096, Math.min(256 * 1024, Math.floor(maxPayload / 4)));
}

export interface SyncServerOptions {
  /** Largest reply, in bytes. */
  readonly budgetBytes: number;
  /** A follower further behind than this many events gets a snapshot rather than pages of events. */
  readonly snapshotGap: number;
}

interface CachedSnapshot {
  readonly index: number;
  readonly parts: readonly string[];
}

/**
 * The master's side. A snapshot is serialized once and kept while it stays usable (its index is
 * still in the log, and not too far behind), so followers that sync at once share it and a transfer
 * in parts sees one stable text.
 */
export class SyncServer {
  private cached: CachedSnapshot | undefined;

  constructor(
    private readonly log: MasterLog,
    private readonly state: () => ControlState,
    private readonly o: SyncServerOptions,
  ) {}

  answer(req: SyncRequest): Extract<SyncReply, { ok: true }> {
    if (req.snapshot) return this.snapshotReply(req.snapshot);
    const last = this.log.last;
    if (last - req.from_index + 1 <= this.o.snapshotGap) {
      const events = this.log.page(req.from_index, this.o.budgetBytes - ENVELOPE_BYTES);
      if (events) return { ok: true, events, last_index: last };
    }
    return this.snapshotReply(undefined);
  }

  /**
   * The part asked for while its snapshot is cached; otherwise part 0 of a new transfer, from the
   * cached snapshot while a follower can still continue after it, else from a fresh one.
   */
  private snapshotReply(
    want: { index: number; part: number } | undefined,
  ): Extract<SyncReply, { ok: true }> {
    const c = this.cached;
    let snap: CachedSnapshot;
    let part = 0;
    if (want && c && want.index === c.index && want.part < c.parts.length) {
      snap = c;
      part = want.part;
    } else {
      const usable =
        c !== undefined &&
        c.index >= this.log.first - 1 &&
        this.log.last - c.index <= this.o.snapshotGap / 2;
      snap = usable ? c : (this.cached = this.serialize());
    }
    return {
      ok: true,
      events: [],
      last_index: this.log.last,
      snapshot_part: { index: snap.index, part, parts: snap.parts.length, data: snap.parts[part]! },
    };
  }

  private serialize(): CachedSnapshot {
    const state = this.state();
    const bytes = Buffer.from(JSON.stringify(state));
    // Base64 grows 4/3 and never needs escaping inside the reply's JSON: the bound is exact.
    const raw = Math.floor(((this.o.budgetBytes - ENVELOPE_BYTES) * 3) / 4 / 3) * 3;
    const parts: string[] = [];
    for (let at = 0; at < bytes.length || parts.length === 0; at += raw)
      parts.push(bytes.subarray(at, at + raw).toString("base64"));
    return { index: state.index, parts };
  }

  /** Forgets the cached snapshot (a new session). */
  reset(): void {
    this.cached = undefined;
  }
}

/** The follower's side of a snapshot transfer: collects the parts of one snapshot, in order. */
export class SnapshotAssembler {
  private index: number | undefined;
  private parts: Buffer[] = [];

  /** What to ask for next: the snapshot and part, or undefined to start (or restart) a transfer. */
  next(): { index: number; part: number } | undefined {
    return this.index === undefined ? undefined : { index: this.index, part: this.parts.length };
  }

  /**
   * Takes a part. Returns the state once complete (validated at this edge), undefined while parts
   * are missing; a part of another snapshot, or out of order, restarts the transfer with it.
   */
  add(p: SnapshotPart): ControlState | undefined {
    if (p.index !== this.index || p.part !== this.parts.length) {
      this.index = undefined;
      this.parts = [];
      if (p.part !== 0) return undefined;
      this.index = p.index;
    }
    this.parts.push(Buffer.from(p.data, "base64"));
    if (this.parts.length < p.parts) return undefined;
    const text = Buffer.concat(this.parts).toString("utf8");
    this.index = undefined;
    this.parts = [];
    const parsed = ControlStateSchema.safeParse(JSON.parse(text));
    if (!parsed.success) throw new Error(`invalid snapshot: ${parsed.error.issues[0]?.message}`);
    return parsed.data;
  }
}
