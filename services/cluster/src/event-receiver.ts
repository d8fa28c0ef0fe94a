// The session's events as they arrive on the bus: each taken or refused by the intake rule
// (event-intake.ts) and then the replica's. Another master's SessionStarted is kept (announced-session.ts)
// until this node adopts that session, and it tells the election at once (the stream's `heard`).
import type { Bus, Unsubscribe } from "@ic/bus";
import type { IndexedEvent, SessionId } from "@ic/protocol";
import { AnnouncedSession } from "./announced-session.ts";
import { intakeOf, replicaTakes } from "./event-intake.ts";
import type { Membership } from "./membership.ts";
import type { Replica } from "./replica.ts";
import type { Roles } from "./roles.ts";
import type { AgentStream } from "./stream.ts";

export interface EventReceiverOptions {
  readonly selfKey: string;
  readonly bus: Pick<Bus, "subscribe">;
  readonly roles: Readonly<Pick<Roles, "current" | "isMaster">>;
  readonly replica: Pick<Replica, "state" | "receive">;
  readonly membership: Pick<Membership, "originOf" | "refuse" | "touch" | "announcedMaster">;
  readonly stream: Pick<AgentStream, "publish">;
}

export class EventReceiver {
  /** Another master's session announced while this node was not in it (see adopted). */
  private readonly announced = new AnnouncedSession();
  private sub: Unsubscribe | undefined;

  constructor(private readonly o: EventReceiverOptions) {}

  start(): void {
    // Only a master publishes events and it applies them as it emits them: its own echo is skipped.
    this.sub = this.o.bus.subscribe("events", (ev, meta) => this.receive(ev, meta.origin), {
      ignoreOwn: true,
    });
  }

  stop(): void {
    this.sub?.();
  }

  /**
   * This node adopted `session`: what its master announced while this node still kept its old
   * session is applied now, so followers do not all ask the new master for its whole log at once.
   */
  adopted(session: SessionId, masterKey: string): void {
    for (const ev of this.announced.take(session, masterKey)) this.o.replica.receive(ev);
  }

  private receive(ev: IndexedEvent, origin: string | undefined): void {
    const { roles, replica, membership } = this.o;
    if (this.announced.offer(ev, origin)) return;
    const view = {
      selfKey: this.o.selfKey,
      current: roles.current,
      originOf: (k: string) => membership.originOf(k),
    };
    const d = intakeOf(ev, origin, view);
    if (d.kind === "wait") return;
    if (d.kind === "refuse") {
      membership.refuse("event", origin, d.why);
      return;
    }
    if (d.announce && origin !== undefined) this.announced.announce(ev, origin);
    if (d.touch !== undefined) membership.touch(d.touch);
    // Treat the announcement as the master's heartbeat so the election rule can adopt it now.
    if (d.announcedMaster && membership.announcedMaster(d.announcedMaster, ev.session_id))
      this.o.stream.publish("heard", { peerKey: d.announcedMaster });
    const now = {
      sessionId: roles.current?.session_id,
      isMaster: roles.isMaster,
      replicaSession: replica.state.session?.session_id,
    };
    if (replicaTakes(ev, now)) replica.receive(ev);
  }
}
