// Every node's view of the cluster, as parts on one in-process stream (stream.ts): membership, the
// replica, the heartbeats, the event receiver, the command client and -- on the elected node only --
// the master role (master-role.ts: sequencing commands into events). The agent itself keeps the
// election and the role and session changes (roles.ts), and the node's public view of it all.
// Invariants: the replica only ever changes through apply(); only the master of a session answers that
// session's command and sync subjects; a node reports `synced` only once it holds its session's state.
// The rules are pure and live in @ic/state (elect, decide, reconcile); this class is their I/O shell.
import { randomUUID } from "node:crypto";
import type {
  Command,
  CommandReply,
  ControlEvent,
  ControlState,
  Heartbeat,
  NodeId,
  SessionId,
} from "@ic/protocol";
import { elect, nodeIdFor } from "@ic/state";
import type { Peer } from "@ic/state";
import type { Unsubscribe } from "@ic/bus";
import type { Logger } from "@ic/log";
import { EventReceiver } from "./event-receiver.ts";
import { Heartbeats } from "./heartbeats.ts";
import { sessionStarted } from "./session-start.ts";
import { CommandClient } from "./command-client.ts";
import { Replica } from "./replica.ts";
import { Membership } from "./membership.ts";
import type { PeerView } from "./membership.ts";
import type { AgentListener, AgentOptions } from "./agent-options.ts";
import { MasterRole } from "./master-role.ts";
import { Roles, type SessionRef } from "./roles.ts";
import { AgentStream } from "./stream.ts";

export class ClusterAgent implements AsyncDisposable {
  /** Which role this node plays in which session; only the agent's role changes write it. */
  private readonly roles = new Roles();
  /** What the parts tell each other: applied events, snapshots, session changes (stream.ts). */
  private readonly stream = new AgentStream();
  /** The replica of the control state (replica.ts). */
  private readonly replica: Replica;
  /** The peers heard, pinned to their connections; who is live, who is gone. */
  private readonly membership: Membership;
  /** The session's events from the bus into the replica (event-receiver.ts). */
  private readonly events: EventReceiver;
  /** The master role's parts: sequencer, log, catch-up, endpoints, hand-off (master-role.ts). */
  private readonly master: MasterRole;
  /** This node's commands to the master (command-client.ts). */
  private readonly commands: CommandClient;
  /** This node's heartbeats out, its peers' in (heartbeats.ts). */
  private readonly heartbeats: Heartbeats;
  private readonly subs: Unsubscribe[] = [];
  private tickTimer: NodeJS.Timeout | undefined;
  private upSince = 0;
  private readonly log: Logger;

  constructor(private readonly o: AgentOptions) {
    this.log = o.log.child({ component: "cluster" });
    const { roles, stream, log } = this;
    const { bus, clock, self } = o;
    const membership = new Membership({
      selfKey: self.peerKey,
      bus,
      clock,
      livenessTimeoutMs: o.timings.livenessTimeoutMs,
      probe: o.probe,
      log,
      stream,
    });
    const replica = new Replica({ roles, origins: membership, stream, bus, log });
    const master = new MasterRole({ replica, membership, roles, stream }, o);
    this.membership = membership;
    this.replica = replica;
    this.master = master;
    this.commands = new CommandClient({
      roles,
      replica,
      peers: membership,
      master,
      selfKey: self.peerKey,
      bus,
      clock,
      commandTimeoutMs: o.commandTimeoutMs,
    });
    this.heartbeats = new Heartbeats({
      self,
      extras: o.extras,
      heartbeatMs: o.timings.heartbeatMs,
      bus,
      clock,
      roles,
      replica,
      membership,
      intentHealth: () => master.sequencer.intents?.health(),
      stream,
      linksRefresh: o.linksRefresh,
    });
    this.events = new EventReceiver({
      selfKey: self.peerKey,
      bus,
      roles,
      replica,
      membership,
      stream,
    });
    // The role change an applied hand-off makes (the only event that moves the role).
    stream.subscribe("applied", ({ ev }) => {
      if (ev.event.type === "MasterHandedOff") this.handedOff(ev.session_id, ev.event);
    });
    // A new peer, a new master claim or an announced session: the election looks again now.
    stream.subscribe("heard", () => this.tick());
  }

  // ---- public view ----

  get peerKey(): string {
    return this.o.self.peerKey;
  }
  get isMaster(): boolean {
    return this.roles.isMaster;
  }
  /** True when the replica holds the state of the session this node is in. */
  get synced(): boolean {
    return this.replica.synced;
  }
  get sessionId(): SessionId | null {
    return this.roles.current?.session_id ?? null;
  }
  get nodeId(): NodeId | null {
    const cur = this.roles.current;
    return cur ? nodeIdFor(cur.session_id, this.o.self.peerKey) : null;
  }
  snapshot(): ControlState {
    return this.replica.state;
  }
  /** Master only: chat tasks open now (0 on a follower). */
  openTasks(): number {
    return this.roles.isMaster ? this.master.sequencer.openTasks : 0;
  }
  /** The master this node follows (undefined while it is master itself or has none). */
  masterPeer(): PeerView | undefined {
    const m = this.roles.current?.master.peer_key;
    return m === undefined || m === this.o.self.peerKey ? undefined : this.membership.get(m);
  }
  /** A peer as last heard, by its peer key (self included; live or not). */
  peer(peerKey: string): PeerView | undefined {
    return this.membership.get(peerKey);
  }
  /**
   * Members of this node's session it has not heard a heartbeat from since it started (names):
   * their engine keys and loads are not known here yet.
   */
  unheardMembers(): string[] {
    return Object.values(this.replica.state.members)
      .filter((m) => m.peer_key !== this.o.self.peerKey && !this.membership.has(m.peer_key))
      .map((m) => m.name);
  }
  /** Peers heard within the liveness timeout, self included. */
  livePeers(): PeerView[] {
    return this.membership.live();
  }
  /** Subscribes a listener to the agent's stream; returns the unsubscribe. */
  on(listener: AgentListener): () => void {
    const { event, snapshot, session } = listener;
    const offs = [
      event && this.stream.subscribe("applied", ({ ev, state }) => event(ev, state)),
      snapshot && this.stream.subscribe("snapshot", snapshot),
      session && this.stream.subscribe("session", ({ previous, next }) => session(previous, next)),
    ];
    return () => {
      for (const off of offs) off?.();
    };
  }

  // ---- lifecycle ----

  start(): void {
    this.upSince = this.o.clock.now();
    const bus = this.o.bus;
    this.events.start();
    // Liveness probes from peers whose connection to this node dropped: this process is here.
    this.subs.push(
      bus.respond(
        "nodePing",
        () => ({ peer_key: this.o.self.peerKey, started_at: this.o.self.startedAt }),
        { suffix: this.o.self.peerKey },
      ),
    );
    this.heartbeats.start();
    const tickMs = Math.max(20, Math.min(250, this.o.timings.electionTimeoutMs / 10));
    this.lastTimerTick = this.o.clock.now();
    this.tickTimer = setInterval(() => this.onTickTimer(tickMs), tickMs);
  }

  async stop(): Promise<void> {
    if (this.roles.stopped) return;
    this.roles.stopped = true;
    clearInterval(this.tickTimer);
    this.heartbeats.stop();
    this.events.stop();
    for (const u of this.subs) u();
    this.master.close();
  }

  /**
   * A planned stop of the master: hands its session to the most senior live member that is caught
   * up and not draining, so the cluster keeps its session (no `session_changed` for anyone's open
   * requests). Commands are refused with `no_master` naming the successor from now on (a follower's
   * `command` waits for the hand-off and asks the successor); intent writes in flight end first
   * (bounded by `waitMs`); then `MasterHandedOff` is sequenced and this node becomes a follower.
   * Returns the successor's peer key, or undefined when this node is not the master or no member
   * can take over (the cluster then elects a new master once this node is gone, as for a loss).
   */
  async handOff(waitMs = 5000): Promise<string | undefined> {
    return this.master.handOffs.run(waitMs);
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  // ---- heartbeat ----

  /** This node's heartbeat as it stands now. */
  heartbeat(): Heartbeat {
    return this.heartbeats.current();
  }

  /** Sends this node's heartbeat now (a drain says `draining` at once). */
  publishHeartbeat(): void {
    this.heartbeats.publish();
  }

  /**
   * A connection to a peer dropped (its watch connection, see peer-watch): the peer is probed over
   * the bus (membership.ts) and, when no probe reaches the same process, marked gone; the next tick
   * acts on it at once (the master emits NodeLeft, a follower whose master it was runs the election).
   * Resolves to true when the peer was declared gone.
   */
  async connectionLost(
    peerKey: string,
    startedAt: number | undefined,
    via: string,
  ): Promise<boolean> {
    const gone = await this.membership.connectionLost(
      peerKey,
      startedAt,
      via,
      () => this.roles.stopped,
    );
    if (gone) this.tick();
    return gone;
  }

  // ---- election ----

  /** When the tick timer last fired (to measure how late it is: this process's own stalls). */
  private lastTimerTick = 0;

  /**
   * The tick timer. A late timer means this process's event loop (or its CPU) stalled; messages that
   * arrived meanwhile are still unread in the socket (timers run before I/O in a loop turn). That tick
   * declares no departures and starts no session: silence it measured may be its own. The next tick,
   * one I/O phase later, has read them.
   */
  private onTickTimer(tickMs: number): void {
    const now = this.o.clock.now();
    const lateMs = Math.max(0, now - this.lastTimerTick - tickMs);
    this.lastTimerTick = now;
    this.tick({ departures: lateMs < Math.max(tickMs, this.o.timings.heartbeatMs / 4) });
  }

  tick(opts: { departures?: boolean } = {}): void {
    if (this.roles.stopped) return;
    const now = this.o.clock.now();
    const self: Peer = { peer_key: this.o.self.peerKey, started_at: this.o.self.startedAt };
    const d = elect({
      now,
      self,
      upSince: this.upSince,
      current: this.roles.current,
      selfIsMaster: this.roles.isMaster,
      peers: this.membership.heardPeers(),
      electionTimeoutMs: this.o.timings.electionTimeoutMs,
    });
    switch (d.kind) {
      case "start_session":
        // Not on an overdue timer tick: the silence it sees may be this process's own stall (the
        // master's heartbeats still unread in the socket); the next tick, on time, decides.
        if (opts.departures !== false) this.startSession();
        break;
      case "adopt":
        this.adopt(d.session_id as SessionId, d.master);
        break;
      case "stay":
      case "wait":
        break;
    }
    // While handing off, the master sequences nothing of its own: the successor takes over.
    if (this.roles.isMaster && !this.master.handOffs.active) {
      this.master.sequencer.supervise(now, opts.departures ?? true, this.roles.current!.session_id);
    }
    this.membership.forgetSilent(now);
  }

  private setSession(next: SessionRef): void {
    const prev = this.roles.current?.session_id ?? null;
    this.roles.current = next;
    this.replica.clearPending();
    if (prev !== next.session_id) {
      this.log.info(
        { previous: prev, session: next.session_id, master: next.master.peer_key },
        "session changed",
      );
      this.stream.publish("session", { previous: prev, next: next.session_id });
    }
  }

  private startSession(): void {
    const now = this.o.clock.now();
    const sessionId = `s-${randomUUID()}` as SessionId;
    const self = this.o.self;
    const event = sessionStarted({
      sessionId,
      now,
      self: this.heartbeat(),
      live: this.livePeers(),
      deposed:
        this.roles.current && this.roles.current.master.peer_key !== self.peerKey
          ? this.roles.current.master.peer_key
          : undefined,
      electionTimeoutMs: this.o.timings.electionTimeoutMs,
      old: this.replica.state,
      // With an intent store, the replica is not whole until the master restored it from there.
      intentRestored: this.o.intents === undefined,
    });
    this.log.info(
      {
        session: sessionId,
        members: event.members.length,
        carried_instances: event.instances.length,
      },
      "elected master; starting session",
    );
    this.becomeMaster(sessionId);
    this.setSession({
      session_id: sessionId,
      master: { peer_key: self.peerKey, started_at: self.startedAt },
    });
    this.master.publish(event);
    this.publishHeartbeat();
  }

  private adopt(sessionId: SessionId, master: Peer): void {
    if (this.roles.isMaster) {
      this.log.warn(
        { session: sessionId, master: master.peer_key },
        "stepping down for a more senior master",
      );
      this.stepDown();
    }
    this.setSession({ session_id: sessionId, master });
    // What the new master announced while this node still kept its old session is applied now, so
    // followers do not all ask the new master for its whole log at once (see AnnouncedSession).
    this.events.adopted(sessionId, master.peer_key);
    // A node the session does not list yet says at once that it adopted it (the master then adds
    // it); one it lists already says so with its next heartbeat. After a master's death every
    // survivor adopts at once: n extra heartbeats, each to n nodes, in one burst.
    const listed = this.synced && Object.hasOwn(this.replica.state.members, this.nodeId!);
    if (!listed) this.publishHeartbeat();
    if (!this.synced) void this.replica.sync(1);
  }

  /**
   * Every replica, at the hand-off event: the session stays, its master changes. The old master
   * becomes a follower (keeping its master subscriptions a while for late askers); the successor
   * becomes the master of the same session, at the index reached.
   */
  private handedOff(
    sessionId: SessionId,
    e: Extract<ControlEvent, { type: "MasterHandedOff" }>,
  ): void {
    if (this.roles.current?.session_id !== sessionId) return;
    const master: Peer = { peer_key: e.master_peer_key, started_at: e.master_started_at };
    this.log.info({ session: sessionId, master: master.peer_key }, "master handed off");
    if (this.roles.isMaster) {
      this.master.retire();
      this.roles.role = "follower";
    }
    this.roles.current = { session_id: sessionId, master };
    if (master.peer_key === this.o.self.peerKey) {
      this.becomeMaster(sessionId);
      this.publishHeartbeat();
    } else if (this.master.handOffs.active) {
      // Says at once that this node is no longer the master.
      this.publishHeartbeat();
    }
  }

  // ---- master role ----

  private becomeMaster(sessionId: SessionId): void {
    this.master.serve(sessionId);
    this.roles.role = "master";
  }

  private stepDown(): void {
    this.master.stop();
    this.roles.role = "follower";
  }

  /** Sends a command to this session's master; throws ServiceError (session_changed, no_master, ...). */
  command(cmd: Command): Promise<Extract<CommandReply, { ok: true }>> {
    return this.commands.send(cmd);
  }
}
