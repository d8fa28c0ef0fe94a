// Pure: what a node does with an event that arrives on the bus (the agent's shell carries it out).
// Events count only from the connection of the master they name (SessionStarted) or of the current
// session's master, so a confused member cannot fork the replicas; and a replica takes an event only
// for the session it is in, when it is not the master (which applied it as it emitted it).
import type { IndexedEvent, SessionId } from "@ic/protocol";
import type { Peer } from "@ic/state";

/** What the intake reads of the node. */
export interface IntakeView {
  readonly selfKey: string;
  /** The session this node is in (or joining) and its master. */
  readonly current: { readonly session_id: SessionId; readonly master: Peer } | null;
  /** The connection a peer's messages come over, once it has been heard. */
  originOf(peerKey: string): string | undefined;
}

export type Intake =
  /** From a master not heard yet: its heartbeat follows at once, and adoption then syncs from it. */
  | { readonly kind: "wait" }
  /** Not from its master's connection: refused (and counted) with this reason. */
  | { readonly kind: "refuse"; readonly why: string }
  | {
      readonly kind: "take";
      /** A SessionStarted of another session: kept for when this node adopts it. */
      readonly announce: boolean;
      /** The master this event shows alive. */
      readonly touch: string | undefined;
      /** Another node announced a session it masters: counts as its heartbeat for the election. */
      readonly announcedMaster: string | undefined;
    };

export function intakeOf(ev: IndexedEvent, origin: string | undefined, view: IntakeView): Intake {
  const cur = view.current;
  const started = ev.event.type === "SessionStarted" ? ev.event.session : undefined;
  const sender = started ? started.master_peer_key : cur?.master.peer_key;
  const senderOrigin = sender === undefined ? undefined : view.originOf(sender);
  if (senderOrigin === undefined) return { kind: "wait" };
  if (origin !== senderOrigin)
    return { kind: "refuse", why: `event ${ev.index} of ${ev.session_id} not from its master` };
  if (started) {
    const masterKey = started.master_peer_key;
    return {
      kind: "take",
      announce: ev.session_id !== cur?.session_id,
      touch: masterKey,
      announcedMaster: masterKey !== view.selfKey ? masterKey : undefined,
    };
  }
  const ofSession = cur !== null && ev.session_id === cur.session_id;
  return {
    kind: "take",
    announce: false,
    touch: ofSession ? cur.master.peer_key : undefined,
    announcedMaster: undefined,
  };
}

/**
 * Whether the replica takes an accepted event, asked after the election had its say: only for the
 * session this node is in, never on its master, and not a SessionStarted the replica already holds
 * (applied when it made this node adopt the session).
 */
export function replicaTakes(
  ev: IndexedEvent,
  view: {
    readonly sessionId: SessionId | undefined;
    readonly isMaster: boolean;
    readonly replicaSession: SessionId | undefined;
  },
): boolean {
  if (view.sessionId === undefined || ev.session_id !== view.sessionId) return false;
  if (view.isMaster) return false;
  return !(ev.event.type === "SessionStarted" && view.replicaSession === ev.session_id);
}
