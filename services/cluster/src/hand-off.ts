// A planned stop of the master: its session goes to the most senior live member that is caught up
// and not draining (session-start.ts's successor), so the cluster keeps its session and nobody's open
// request sees `session_changed`. While it runs, commands are answered `no_master` naming the
// successor; the MasterHandedOff event it sequences moves the role (the agent's handedOff).
import type { Clock, CommandReply, ControlEvent, SessionId } from "@ic/protocol";
import type { Peer } from "@ic/state";
import type { Logger } from "@ic/log";
import type { PeerView } from "./membership.ts";
import type { Replica } from "./replica.ts";
import type { Roles } from "./roles.ts";
import { successor } from "./session-start.ts";

export interface HandOffOptions {
  readonly selfKey: string;
  readonly livenessTimeoutMs: number;
  readonly log: Logger;
  readonly clock: Pick<Clock, "now">;
  /** The session this node masters now (undefined: not master, or stopping). */
  readonly roles: Pick<Roles, "mastering">;
  /** The members, to pick the successor from. */
  readonly replica: Pick<Replica, "state">;
  readonly peers: { get(peerKey: string): PeerView | undefined };
  /** Intent writes in flight, settled (undefined without an intent store). */
  readonly intentsSettled: () => Promise<void> | undefined;
  /** Sequences the MasterHandedOff event (master-role.ts). */
  readonly publish: (event: ControlEvent) => void;
}

export class HandOff {
  private pending: { session_id: SessionId; to: Peer } | undefined;

  constructor(private readonly o: HandOffOptions) {}

  /** True from the start of a hand-off until this node is master again or stops being it. */
  get active(): boolean {
    return this.pending !== undefined;
  }

  /** The answer to a command of `sessionId` while it is being handed off (undefined otherwise). */
  reply(sessionId: SessionId): CommandReply | undefined {
    const p = this.pending;
    if (p?.session_id !== sessionId) return undefined;
    return {
      ok: false,
      error: {
        code: "no_master",
        message: "the master handed the session off; retry with the new master",
        details: { handed_off_to: p.to.peer_key },
      },
    };
  }

  clear(): void {
    this.pending = undefined;
  }

  /**
   * Hands the session off: picks the successor, refuses commands from then on, lets intent writes
   * in flight end (bounded by `waitMs`), then sequences MasterHandedOff. Returns the successor's peer
   * key, or undefined when this node is not the master or no member can take over.
   */
  async run(waitMs: number): Promise<string | undefined> {
    const h = this.o;
    const session = h.roles.mastering();
    if (session === undefined || this.pending) return undefined;
    const to = successor({
      state: h.replica.state,
      sessionId: session,
      selfKey: h.selfKey,
      peer: (k) => h.peers.get(k),
      now: h.clock.now(),
      livenessTimeoutMs: h.livenessTimeoutMs,
    });
    if (!to) return undefined;
    this.pending = { session_id: session, to: to.peer };
    h.log.info({ session, to: to.peer.peer_key }, "handing the session off");
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      h.intentsSettled(),
      new Promise<void>((r) => (timer = setTimeout(r, waitMs))),
    ]);
    clearTimeout(timer);
    if (h.roles.mastering() !== session) {
      this.pending = undefined;
      return undefined;
    }
    h.publish({
      type: "MasterHandedOff",
      master_node_id: to.nodeId,
      master_peer_key: to.peer.peer_key,
      master_started_at: to.peer.started_at,
    });
    return to.peer.peer_key;
  }
}
