// The events of a session another master announced while this node was not in it (yet), kept so that
// adopting it a moment later applies them at once instead of asking the new master for its whole log.
// After a master dies, a follower that heard the dead master a little later than the successor did
// still counts the old session as live and larger when the new SessionStarted arrives, so it drops
// the announcement and adopts the new session only when its own election timeout runs out. Without
// this, every such follower then asked the new master for the log from index 1 at the same moment
// (n full-state sync replies, the election's convergence waiting on the slowest); with it, they sync
// nothing. Only one session is held: the latest announced. Events are held only from the connection
// that announced the session, and only as one run without gaps from SessionStarted on (a gap ends
// the run: the replica's gap repair fetches the rest after adopting).
import type { IndexedEvent } from "@ic/protocol";

interface Held {
  readonly session: string;
  readonly masterKey: string;
  readonly origin: string;
  readonly events: IndexedEvent[];
  /** Set at the first gap (or the bound): later events are not held. */
  closed: boolean;
}

export class AnnouncedSession {
  private held: Held | undefined;

  constructor(private readonly maxEvents = 10_000) {}

  /**
   * A SessionStarted that came from its master's connection (the caller checked the origin against
   * the master's pinned one). Replaces whatever was held.
   */
  announce(ev: IndexedEvent, origin: string): void {
    if (ev.event.type !== "SessionStarted") return;
    this.held = {
      session: ev.session_id,
      masterKey: ev.event.session.master_peer_key,
      origin,
      events: [ev],
      closed: false,
    };
  }

  /**
   * A later event of the held session from the connection that announced it: held when it follows
   * the held run directly. True when the event belongs to the held session (held or not), false when
   * it is not this holder's to judge.
   */
  offer(ev: IndexedEvent, origin: string | undefined): boolean {
    const h = this.held;
    if (!h || ev.event.type === "SessionStarted" || ev.session_id !== h.session) return false;
    if (origin !== h.origin) return false;
    if (!h.closed) {
      const next = h.events[h.events.length - 1]!.index + 1;
      if (ev.index === next && h.events.length < this.maxEvents) h.events.push(ev);
      else if (ev.index > next || h.events.length >= this.maxEvents) h.closed = true;
    }
    return true;
  }

  /**
   * The held run (SessionStarted first) when it is `session`'s as announced by `masterKey`; nothing
   * is held afterwards, whichever session is taken.
   */
  take(session: string, masterKey: string): IndexedEvent[] {
    const h = this.held;
    this.held = undefined;
    if (!h || h.session !== session || h.masterKey !== masterKey) return [];
    return h.events;
  }
}
