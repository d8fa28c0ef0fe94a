// The master's in-memory log of the current session's events, bounded by count and bytes.
// Followers catch up from it one page at a time (master-endpoints.ts serves them, replica-sync.ts asks); past its start they get a snapshot.
import type { IndexedEvent } from "@ic/protocol";

export interface LogBounds {
  /** Events kept after a compaction (the log compacts when it holds twice as many). */
  readonly retainEvents: number;
  /** Bytes kept after a compaction (the log compacts when it holds twice as many). */
  readonly retainBytes: number;
}

export const DEFAULT_LOG_BOUNDS: LogBounds = { retainEvents: 50_000, retainBytes: 32 * 1024 ** 2 };

interface Entry {
  readonly ev: IndexedEvent;
  /** Its JSON encoding's length in bytes, as it goes on the bus. */
  readonly bytes: number;
}

/** Consecutive events `first`..`last`; what was dropped is only reachable through a snapshot. */
export class MasterLog {
  private entries: Entry[] = [];
  private bytes = 0;

  constructor(private readonly bounds: LogBounds = DEFAULT_LOG_BOUNDS) {}

  /** Index of the oldest event kept (last + 1 when empty). */
  get first(): number {
    return this.entries[0]?.ev.index ?? this.last + 1;
  }
  private lastIndex = 0;
  get last(): number {
    return this.lastIndex;
  }

  /** Appends the event the master just applied; a SessionStarted starts a new log. */
  append(ev: IndexedEvent, bytes: number): void {
    if (ev.event.type === "SessionStarted" || ev.index !== this.lastIndex + 1) this.reset();
    this.entries.push({ ev, bytes });
    this.bytes += bytes;
    this.lastIndex = ev.index;
    const b = this.bounds;
    if (this.entries.length > b.retainEvents * 2 || this.bytes > b.retainBytes * 2) this.compact();
  }

  /** Drops the oldest events until both bounds hold again. */
  private compact(): void {
    const b = this.bounds;
    let drop = Math.max(0, this.entries.length - b.retainEvents);
    let bytes = this.bytes;
    for (let i = 0; i < drop; i++) bytes -= this.entries[i]!.bytes;
    while (drop < this.entries.length - 1 && bytes > b.retainBytes)
      bytes -= this.entries[drop++]!.bytes;
    this.entries = this.entries.slice(drop);
    this.bytes = bytes;
  }

  /**
   * The events from `from` on, as many as fit `budget` bytes together; empty when `from` is past
   * the end, undefined when it lies before the log's start or its first event alone exceeds the
   * budget (the follower then needs a snapshot).
   */
  page(from: number, budget: number): IndexedEvent[] | undefined {
    if (from > this.lastIndex) return [];
    if (from < this.first) return undefined;
    const out: IndexedEvent[] = [];
    let used = 0;
    for (let i = from - this.first; i < this.entries.length; i++) {
      const e = this.entries[i]!;
      if (used + e.bytes > budget) break;
      used += e.bytes + 1;
      out.push(e.ev);
    }
    return out.length > 0 ? out : undefined;
  }

  /** Events and bytes held (for /metrics and tests). */
  get size(): { events: number; bytes: number } {
    return { events: this.entries.length, bytes: this.bytes };
  }

  reset(): void {
    this.entries = [];
    this.bytes = 0;
    this.lastIndex = 0;
  }
}
