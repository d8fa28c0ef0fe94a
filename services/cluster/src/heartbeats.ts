// This node's heartbeats out and its peers' in: one every `heartbeatMs` (links only when they changed
// or a new peer needs them, link-report.ts); a peer's goes into membership, a new peer or a new master
// claim goes on the stream for the election, and a follower behind its master's log asks for the rest.
import type { Bus, Unsubscribe } from "@ic/bus";
import type { Clock, HealthEntry, Heartbeat, HeartbeatMessage } from "@ic/protocol";
import type { HeartbeatExtras, SelfInfo } from "./agent-options.ts";
import { behindMaster, heartbeatOf } from "./heartbeat.ts";
import { LinkReport } from "./link-report.ts";
import type { Membership } from "./membership.ts";
import type { Replica } from "./replica.ts";
import type { Roles } from "./roles.ts";
import type { AgentStream } from "./stream.ts";

export interface HeartbeatsOptions {
  readonly self: SelfInfo;
  /** What the worker and the node's other parts add (telemetry, runners, health, ...). */
  readonly extras: () => HeartbeatExtras;
  readonly heartbeatMs: number;
  readonly bus: Pick<Bus, "publish" | "subscribe">;
  readonly clock: Pick<Clock, "now">;
  readonly roles: Readonly<Pick<Roles, "current" | "isMaster" | "stopped">>;
  readonly replica: Pick<Replica, "state" | "synced" | "sync">;
  readonly membership: Pick<Membership, "own" | "heard">;
  /** The master's intent store health (a failing store), when it has one to report. */
  readonly intentHealth: () => HealthEntry | undefined;
  readonly stream: Pick<AgentStream, "publish">;
  /** Unchanged links still go out every this many heartbeats (default DEFAULT_LINKS_REFRESH). */
  readonly linksRefresh?: number | undefined;
}

export class Heartbeats {
  private readonly linkReport: LinkReport;
  private timer: NodeJS.Timeout | undefined;
  private sub: Unsubscribe | undefined;

  constructor(private readonly o: HeartbeatsOptions) {
    this.linkReport = new LinkReport(o.linksRefresh);
  }

  start(): void {
    this.sub = this.o.bus.subscribe("heartbeat", (hb, meta) => this.receive(hb, meta.origin));
    this.publish();
    this.timer = setInterval(() => this.publish(), this.o.heartbeatMs);
  }

  stop(): void {
    clearInterval(this.timer);
    this.sub?.();
  }

  /** This node's heartbeat as it stands now. */
  current(): Heartbeat {
    const { roles, replica } = this.o;
    return heartbeatOf({
      self: this.o.self,
      extras: this.o.extras(),
      current: roles.current,
      isMaster: roles.isMaster,
      lastIndex: replica.state.index,
      now: this.o.clock.now(),
      intentHealth: roles.isMaster ? this.o.intentHealth() : undefined,
    });
  }

  /** Sends this node's heartbeat now (also on every role change, so peers hear of it at once). */
  publish(): void {
    if (this.o.roles.stopped) return;
    const hb = this.current();
    this.o.membership.own(hb);
    // Unchanged links stay off the wire: receivers keep the last ones (link-report.ts).
    const { links, ...rest } = hb;
    const carried = this.linkReport.next(links);
    const msg: HeartbeatMessage = carried ? { ...rest, links: carried } : rest;
    this.o.bus.publish("heartbeat", msg);
  }

  private receive(msg: HeartbeatMessage, origin: string | undefined): void {
    const { roles, replica } = this.o;
    if (msg.peer_key === this.o.self.peerKey) return;
    const heard = this.o.membership.heard(msg, origin);
    if (!heard) return;
    const { known, hb } = heard;
    // A process not heard before has none of this node's links yet: the next heartbeat carries them.
    if (known?.heartbeat.started_at !== msg.started_at) this.linkReport.newPeer();
    if (!known || (hb.is_master && !known.heartbeat.is_master))
      this.o.stream.publish("heard", { peerKey: hb.peer_key });
    // The master's heartbeat says how far its log goes: a follower behind it asks for the rest.
    const follower = {
      current: roles.current,
      isMaster: roles.isMaster,
      synced: replica.synced,
      index: replica.state.index,
    };
    if (behindMaster(hb, follower)) void replica.sync(replica.state.index + 1);
  }
}
