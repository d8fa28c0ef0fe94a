// This node's replica of the control state: events applied in index order through the pure
// apply() (@ic/state), those ahead of a gap buffered, and gaps and catch-up fetched from the master in
// bounded pages or snapshot parts (replica-sync.ts). The master applies what it emits through it too.
// Each event applied and snapshot installed goes out on the agent's stream (stream.ts).
import type { Bus } from "@ic/bus";
import type { Logger } from "@ic/log";
import { emptyState } from "@ic/protocol";
import type { ControlState, IndexedEvent } from "@ic/protocol";
import { apply, OutOfOrderEvent } from "@ic/state";
import { SnapshotAssembler } from "./replica-sync.ts";
import type { Roles } from "./roles.ts";
import type { AgentStream } from "./stream.ts";

/** Requests one catch-up may take before it yields to the next trigger (a bound, never reached in practice). */
const MAX_SYNC_ROUNDS = 10_000;
/** Events buffered ahead of a gap while a sync is out; beyond it they are fetched by the sync. */
const MAX_PENDING = 10_000;

/** What the replica reads of this node's role: the session it is in, and whether it masters it. */
export type ReplicaRoles = Readonly<Pick<Roles, "current" | "isMaster">>;

export interface ReplicaOptions {
  readonly roles: ReplicaRoles;
  /** Which connection a peer speaks from (membership.ts): catch-up asks the master's. */
  readonly origins: { originOf(peerKey: string): string | undefined };
  /** Where it says what it applied (`applied`) and installed (`snapshot`). */
  readonly stream: Pick<AgentStream, "publish">;
  readonly bus: Pick<Bus, "request">;
  readonly log: Logger;
}

export class Replica {
  private _state: ControlState = emptyState();
  private readonly pending = new Map<number, IndexedEvent>();
  private syncing = false;
  private readonly roles: ReplicaRoles;

  constructor(private readonly o: ReplicaOptions) {
    this.roles = o.roles;
  }

  get state(): ControlState {
    return this._state;
  }

  /** True when the replica holds the state of the session this node is in. */
  get synced(): boolean {
    const cur = this.roles.current;
    return cur !== null && this._state.session?.session_id === cur.session_id;
  }

  /** A new session: events buffered for the old one go. */
  clearPending(): void {
    this.pending.clear();
  }

  receive(ev: IndexedEvent): void {
    if (ev.event.type !== "SessionStarted" && ev.index <= this._state.index && this.synced) return;
    if (ev.event.type === "SessionStarted" || (this.synced && ev.index === this._state.index + 1)) {
      this.apply(ev);
      this.drainPending();
      return;
    }
    if (this.pending.size < MAX_PENDING) this.pending.set(ev.index, ev);
    void this.sync(this.synced ? this._state.index + 1 : 1);
  }

  /** Applies buffered events that directly follow the replica's index. */
  private drainPending(): void {
    if (!this.synced) return;
    for (
      let next = this.pending.get(this._state.index + 1);
      next;
      next = this.pending.get(this._state.index + 1)
    ) {
      this.pending.delete(next.index);
      this.apply(next);
    }
  }

  apply(ev: IndexedEvent): void {
    // A node the master declared gone counts as gone here too, until it is heard again: an election
    // right after must not carry it into the new session while its heartbeats are merely recent.
    const left =
      ev.event.type === "NodeLeft" && Object.hasOwn(this._state.members, ev.event.node_id)
        ? this._state.members[ev.event.node_id]!.peer_key
        : undefined;
    try {
      this._state = apply(this._state, ev);
    } catch (e) {
      if (e instanceof OutOfOrderEvent) {
        void this.sync(this.synced ? this._state.index + 1 : 1);
        return;
      }
      throw e;
    }
    this.o.stream.publish("applied", { ev, state: this._state, left });
  }

  /**
   * Gap repair and catch-up: asks the master for the events from `fromIndex`, one bounded page (or
   * snapshot part) per request, until the replica reaches the index the master reported.
   */
  async sync(fromIndex: number): Promise<void> {
    if (this.syncing || !this.roles.current || this.roles.isMaster) return;
    this.syncing = true;
    const current = this.roles.current!;
    const session = current.session_id;
    const masterOrigin = this.o.origins.originOf(current.master.peer_key);
    const snapshot = new SnapshotAssembler();
    try {
      if (masterOrigin === undefined) throw new Error("the master has not been heard yet");
      let from = fromIndex;
      for (let round = 0; round < MAX_SYNC_ROUNDS; round++) {
        const reply = await this.o.bus.request(
          "masterSync",
          { session_id: session, from_index: from, ...this.snapshotWanted(snapshot) },
          { timeoutMs: 2000, suffix: session, from: masterOrigin },
        );
        if (this.roles.current?.session_id !== session) return;
        if (!reply.ok) {
          this.o.log.warn({ error: reply.error }, "sync refused");
          return;
        }
        const before = this._state.index;
        if (reply.snapshot_part) {
          const state = snapshot.add(reply.snapshot_part);
          if (state) this.installSnapshot(state);
          else if (snapshot.next() === undefined) break; // a part out of order: next trigger retries
        } else {
          for (const ev of reply.events) {
            if (
              ev.event.type === "SessionStarted" ||
              (this.synced && ev.index === this._state.index + 1)
            )
              this.apply(ev);
          }
          // Nothing applicable (a gap inside the page): the next trigger starts over.
          if (reply.events.length === 0 || this._state.index === before) break;
        }
        if (snapshot.next() === undefined && this.synced && this._state.index >= reply.last_index)
          break;
        from = this.synced ? this._state.index + 1 : 1;
      }
      for (const k of [...this.pending.keys()]) if (k <= this._state.index) this.pending.delete(k);
      // Events that arrived while the requests were out (e.g. this node's own NodeJoined, sequenced
      // just after it adopted the session) follow on directly: without this drain they would wait
      // for yet another event before being applied.
      this.drainPending();
    } catch (e) {
      this.o.log.debug({ err: e }, "sync failed; will retry on the next event or tick");
    } finally {
      this.syncing = false;
    }
    if (this.roles.current && !this.synced) setTimeout(() => void this.sync(1), 200).unref();
  }

  private snapshotWanted(a: SnapshotAssembler): { snapshot?: { index: number; part: number } } {
    const next = a.next();
    return next ? { snapshot: next } : {};
  }

  /** Replaces the replica with the master's snapshot (a compacted or long gap). */
  private installSnapshot(state: ControlState): void {
    this._state = state;
    this.o.stream.publish("snapshot", state);
  }
}
