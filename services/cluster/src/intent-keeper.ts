// The operator's intent kept durably, on the master: an intent change (a deployment, a model) is
// written to the intent store before it is sequenced, a refused write that may still commit is undone,
// and a new master loads what the store holds into the replica before anything else (a full restart
// starts from nothing but the store). One change at a time: each waits on the store's quorum.
import type { Logger } from "@ic/log";
import { toWireError } from "@ic/protocol";
import type {
  Clock,
  Command,
  CommandReply,
  ControlEvent,
  HealthEntry,
  InstanceId,
  IntentStore,
  IntentWrite,
  NodeId,
  SessionId,
} from "@ic/protocol";
import { amendWrites, intentWrites, restoreIntent } from "@ic/state";
import type { decide, IdKind } from "@ic/state";
import type { Replica } from "./replica.ts";
import type { Roles } from "./roles.ts";

type Decision = ReturnType<typeof decide>;

/** The sequencer's two steps the keeper runs a changing command through, around its store write. */
export interface IntentSequencer {
  /** The pure decision against the replica, with these ids, at `now`. */
  decide(from: NodeId, cmd: Command, ids: (kind: IdKind) => string, now: number): Decision;
  /** Sequences an accepted decision; answers the command. */
  accept(d: Extract<Decision, { ok: true }>): CommandReply;
}

export interface IntentKeeperOptions {
  readonly store: IntentStore;
  readonly sequencer: IntentSequencer;
  /** This node is still the master of that session (a change waited on the store meanwhile). */
  readonly roles: Pick<Roles, "masters">;
  readonly replica: Pick<Replica, "state">;
  /** Sequences an event (master-role.ts). */
  readonly publish: (event: ControlEvent) => void;
  readonly clock: Pick<Clock, "now">;
  readonly log: Logger;
  readonly newId: (kind: IdKind) => string;
}

export const SESSION_CHANGED: CommandReply = {
  ok: false,
  error: { code: "session_changed", message: "session changed; retry" },
};

/** A nodeHealth entry once the intent store has failed for this long. */
const INTENT_HEALTH_AFTER_MS = 5000;
/** Retries of the restore: cheap (one read), and every second counts after a full restart. */
const INTENT_RETRY_MS = 250;
const INTENT_RETRY_MAX_MS = 1000;

function freshIntentState() {
  return {
    /** The replica holds the stored intent (restored, or copied into a new store). */
    loaded: false,
    busy: false,
    nextAttemptAt: 0,
    delayMs: INTENT_RETRY_MS,
    /** Undoing writes that failed (they may still commit): applied before anything else. */
    undo: [] as IntentWrite[],
    failingSince: undefined as number | undefined,
    lastError: undefined as string | undefined,
  };
}

export class IntentKeeper {
  /** The store's state for this master stint (see supervise). */
  private st = freshIntentState();
  /** Intent changes and the restore run one at a time (each waits on the store). */
  private chain: Promise<unknown> = Promise.resolve();

  constructor(private readonly o: IntentKeeperOptions) {}

  /** A new master stint: the intent is loaded again; undoing failed writes still waits its turn. */
  reset(): void {
    this.st = { ...freshIntentState(), undo: this.st.undo };
  }

  /** Resolves once the changes under way have ended (a hand-off waits for them). */
  settled(): Promise<void> {
    return this.chain.then(
      () => undefined,
      () => undefined,
    );
  }

  /** Whether a decision changes intent (then it goes through `persist`). */
  static changes(events: readonly ControlEvent[]): boolean {
    return intentWrites(events).length > 0;
  }

  /** A nodeHealth entry (for the master to send) while the store has failed for a while. */
  health(): HealthEntry | undefined {
    const since = this.st.failingSince;
    if (since === undefined) return undefined;
    if (this.o.clock.now() - since < INTENT_HEALTH_AFTER_MS) return undefined;
    return {
      code: "intent_store_unavailable",
      severity: this.st.loaded ? "warn" : "error",
      message: `the intent store has not answered for ${Math.round((this.o.clock.now() - since) / 1000)} s (${this.st.lastError ?? "no answer"})${this.st.loaded ? "" : "; deployments are not restored yet"}`,
      remediation:
        "start the other nodes (the store needs a majority of up to three replicas) or heal the partition; placements and deletions are refused meanwhile, chat keeps serving",
    };
  }

  /**
   * An intent change, one at a time: decided, written to the store (a quorum acknowledges it, or
   * the command is refused with no_quorum and nothing changes), decided again against the replica
   * as it is after the wait (with the same ids), then sequenced. Should the second decision differ
   * (the state moved during the write: a race for memory lost to a re-placement, a node gone), the
   * writes it no longer makes are undone and the command gets the second decision's answer.
   */
  persist(sessionId: SessionId, from: NodeId, cmd: Command): Promise<CommandReply> {
    const { store } = this.o;
    const run = async (): Promise<CommandReply> => {
      if (!this.o.roles.masters(sessionId)) return SESSION_CHANGED;
      const ids: string[] = [];
      const now = this.o.clock.now();
      const first = this.o.sequencer.decide(
        from,
        cmd,
        (kind) => {
          const id = this.o.newId(kind);
          ids.push(id);
          return id;
        },
        now,
      );
      if (!first.ok) return { ok: false, error: toWireError(first.error) };
      const writes = intentWrites(first.events);
      try {
        await store.apply(writes);
        this.st.failingSince = undefined;
      } catch (e) {
        // A write that timed out may still be committed later (by a store leader that held it
        // and regains a quorum): the client was refused, so it is undone once the store answers.
        this.st.undo.push(...amendWrites(writes, []));
        this.failed(e);
        return { ok: false, error: toWireError(e) };
      }
      // The store holds it now: a master that took over meanwhile restores it from there.
      if (!this.o.roles.masters(sessionId)) return SESSION_CHANGED;
      let next = 0;
      const second = this.o.sequencer.decide(
        from,
        cmd,
        (kind) => ids[next++] ?? this.o.newId(kind),
        now,
      );
      const fix = amendWrites(writes, second.ok ? intentWrites(second.events) : []);
      if (fix.length > 0)
        await store.apply(fix).catch((e: unknown) => {
          this.st.undo.push(...fix);
          this.o.log.warn(
            { err: e, fix },
            "could not amend an intent write; retrying with the store",
          );
        });
      if (!second.ok) return { ok: false, error: toWireError(second.error) };
      return this.o.sequencer.accept(second);
    };
    const reply = this.chain.then(run, run);
    this.chain = reply.catch(() => {});
    return reply;
  }

  private intentFailed(e: unknown): void {
    this.st.failingSince ??= this.o.clock.now();
    this.st.lastError = e instanceof Error ? e.message : String(e);
  }

  private failed(e: unknown): void {
    this.st.failingSince ??= this.o.clock.now();
    this.st.lastError = e instanceof Error ? e.message : String(e);
  }

  /**
   * Master only, every tick: until the replica holds the stored intent, load it (a new session
   * starts from what this node's replica carried, which after a full restart is nothing) and
   * sequence what brings the replica to it; first, undo the writes that were refused but may have
   * committed. Retried with backoff while the store has no quorum.
   */
  supervise(now: number, session: SessionId): void {
    const { store } = this.o;
    const st = this.st;
    if (st.busy || now < st.nextAttemptAt) return;
    if (st.loaded && st.undo.length === 0) return;
    st.busy = true;
    const attempt = async () => {
      try {
        if (st.undo.length > 0) {
          const undo = [...st.undo];
          await store.apply(undo);
          st.undo.splice(0, undo.length);
        }
        if (st.loaded) return;
        const stored = await store.load();
        if (!this.o.roles.masters(session)) return;
        const r = restoreIntent(
          this.o.replica.state,
          stored,
          () => this.o.newId("instance") as InstanceId,
        );
        await store.apply(r.writes);
        if (!this.o.roles.masters(session)) return;
        for (const e of r.events) this.o.publish(e);
        this.o.publish({ type: "IntentRestored" });
        st.loaded = true;
        st.failingSince = undefined;
        st.delayMs = INTENT_RETRY_MS;
        this.o.log.info(
          {
            deployments: stored.deployments.length,
            models: stored.models.length,
            restored: r.events.length,
            copied: r.writes.length,
          },
          "intent restored from the intent store",
        );
      } catch (e) {
        this.failed(e);
        st.nextAttemptAt = this.o.clock.now() + st.delayMs;
        st.delayMs = Math.min(INTENT_RETRY_MAX_MS, st.delayMs * 2);
        this.o.log.debug({ err: e }, "intent store not reachable yet; retrying");
      } finally {
        st.busy = false;
      }
    };
    const p = this.chain.then(attempt, attempt);
    this.chain = p;
  }
}
