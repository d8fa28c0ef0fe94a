// The master's in-memory log of the current session's events, bounded by compaction.
// When it grows past twice `retain`, it keeps a snapshot of the current state and drops older events.
import type { ControlState, IndexedEvent } from "@ic/protocol";

export class MasterLog {
  private events: IndexedEvent[] = [];
  private snapshot: ControlState | null = null;

  constructor(private readonly retain: number) {}

  /** Call after the event was applied; `state` is the state right after it. */
  append(ev: IndexedEvent, state: ControlState): void {
    this.events.push(ev);
    if (this.events.length > this.retain * 2) {
      this.snapshot = state;
      this.events = this.events.slice(-this.retain);
    }
  }

  /**
   * Events from `fromIndex` on; when some of them were compacted away, the snapshot to start
   * from plus every retained event after it.
   */
  since(fromIndex: number): { snapshot?: ControlState; events: IndexedEvent[] } {
    const first = this.events[0]?.index ?? 1;
    if (fromIndex >= first || !this.snapshot) {
      return { events: this.events.filter((e) => e.index >= fromIndex) };
    }
    const snap = this.snapshot;
    return { snapshot: snap, events: this.events.filter((e) => e.index > snap.index) };
  }

  reset(): void {
    this.events = [];
    this.snapshot = null;
  }
}
