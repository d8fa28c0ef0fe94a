// Every node's view of the cluster: hears heartbeats, runs the election rule, holds the replica of
// the control state, and -- on the elected node only -- acts as master (sequencing commands into events).
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
  HeartbeatMessage,
  IndexedEvent,
  NodeId,
  SessionId,
} from "@ic/protocol";
import { elect, nodeIdFor } from "@ic/state";
import type { Peer } from "@ic/state";
import type { Unsubscribe } from "@ic/bus";
import type { Logger } from "@ic/log";
import { AnnouncedSession } from "./announced-session.ts";
import { LinkReport } from "./link-report.ts";
import { SESSION_CHANGED } from "./intent-keeper.ts";
import { sessionStarted } from "./session-start.ts";
import type { CommandClient } from "./command-client.ts";
import type { Replica } from "./replica.ts";
import { Membership } from "./membership.ts";
import type { PeerView } from "./membership.ts";
import type { AgentListener, AgentOptions } from "./agent-options.ts";
import { commandClientFor, replicaFor, type AgentCore } from "./agent-wiring.ts";
import { MasterRole } from "./master-role.ts";
import { intakeOf, replicaTakes } from "./event-intake.ts";
import { behindMaster, heartbeatOf } from "./heartbeat.ts";

type Role = "follower" | "master";

export class ClusterAgent implements AsyncDisposable {
  /** The replica of the control state (replica.ts). */
  private readonly replica: Replica;
  private role: Role = "follower";
  /** The session this node has joined (or is joining) and its master. */
  private current: { session_id: SessionId; master: Peer } | null = null;
  /** The peers heard, pinned to their connections; who is live, who is gone. */
  private readonly membership: Membership;
  /** Another master's session announced while this node was not in it (see adopt). */
  private readonly announced = new AnnouncedSession();
  /** The master role's parts: sequencer, log, catch-up, endpoints, hand-off (master-role.ts). */
  private readonly master: MasterRole;
  /** This node's commands to the master (command-client.ts). */
  private readonly commands: CommandClient;
  /** Which heartbeats carry this node's links (link-report.ts). */
  private readonly linkReport: LinkReport;
  private readonly listeners = new Set<AgentListener>();
  private readonly subs: Unsubscribe[] = [];
  private tickTimer: NodeJS.Timeout | undefined;
  private hbTimer: NodeJS.Timeout | undefined;
  private upSince = 0;
  private stopped = false;
  private readonly log: Logger;

  constructor(private readonly o: AgentOptions) {
    this.linkReport = new LinkReport(o.linksRefresh);
    this.log = o.log.child({ component: "cluster" });
    const core: AgentCore = {
      log: this.log,
      isMaster: () => this.role === "master",
      current: () => this.current,
      state: () => this.replica.state,
      synced: () => this.synced,
      stopped: () => this.stopped,
      emit: (e) => void this.emit(e),
      livePeers: () => this.livePeers(),
      peer: (peerKey) => this.membership.get(peerKey),
      originOf: (peerKey) => this.originOf(peerKey),
      handle: (session, from, cmd) => this.handleCommand(session, from, cmd),
      applied: (ev, left) => this.applied(ev, left),
      snapshotInstalled: (state) => {
        for (const l of this.listeners) l.snapshot?.(state);
      },
      refuse: (what, origin, why) => this.membership.refuse(what, origin, why),
    };
    this.master = new MasterRole(core, o);
    this.replica = replicaFor(core, o);
    this.commands = commandClientFor(core, o);
    this.membership = new Membership({
      selfKey: o.self.peerKey,
      bus: o.bus,
      clock: o.clock,
      livenessTimeoutMs: o.timings.livenessTimeoutMs,
      probe: o.probe,
      log: this.log,
    });
  }

  // ---- public view ----

  get peerKey(): string {
    return this.o.self.peerKey;
  }
  get isMaster(): boolean {
    return this.role === "master";
  }
  /** True when the replica holds the state of the session this node is in. */
  get synced(): boolean {
    return this.replica.synced;
  }
  get sessionId(): SessionId | null {
    return this.current?.session_id ?? null;
  }
  get nodeId(): NodeId | null {
    return this.current ? nodeIdFor(this.current.session_id, this.o.self.peerKey) : null;
  }
  snapshot(): ControlState {
    return this.replica.state;
  }
  /** Master only: chat tasks open now (0 on a follower). */
  openTasks(): number {
    return this.role === "master" ? this.master.sequencer.openTasks : 0;
  }
  /** The master this node follows (undefined while it is master itself or has none). */
  masterPeer(): PeerView | undefined {
    const m = this.current?.master.peer_key;
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
  on(listener: AgentListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  // ---- lifecycle ----

  start(): void {
    this.upSince = this.o.clock.now();
    const bus = this.o.bus;
    this.subs.push(bus.subscribe("heartbeat", (hb, meta) => this.onHeartbeat(hb, meta.origin)));
    // Only a master publishes events and it applies them as it emits them: its own echo is skipped.
    this.subs.push(
      bus.subscribe("events", (ev, meta) => this.onEvent(ev, meta.origin), { ignoreOwn: true }),
    );
    // Liveness probes from peers whose connection to this node dropped: this process is here.
    this.subs.push(
      bus.respond(
        "nodePing",
        () => ({ peer_key: this.o.self.peerKey, started_at: this.o.self.startedAt }),
        { suffix: this.o.self.peerKey },
      ),
    );
    this.publishHeartbeat();
    this.hbTimer = setInterval(() => this.publishHeartbeat(), this.o.timings.heartbeatMs);
    const tickMs = Math.max(20, Math.min(250, this.o.timings.electionTimeoutMs / 10));
    this.lastTimerTick = this.o.clock.now();
    this.tickTimer = setInterval(() => this.onTickTimer(tickMs), tickMs);
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearInterval(this.tickTimer);
    clearInterval(this.hbTimer);
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

  heartbeat(): Heartbeat {
    return heartbeatOf({
      self: this.o.self,
      extras: this.o.extras(),
      current: this.current,
      isMaster: this.role === "master",
      lastIndex: this.replica.state.index,
      now: this.o.clock.now(),
      intentHealth: this.role === "master" ? this.master.sequencer.intents?.health() : undefined,
    });
  }

  publishHeartbeat(): void {
    if (this.stopped) return;
    const hb = this.heartbeat();
    this.membership.own(hb);
    // Unchanged links stay off the wire: receivers keep the last ones (link-report.ts).
    const { links, ...rest } = hb;
    const carried = this.linkReport.next(links);
    const msg: HeartbeatMessage = carried ? { ...rest, links: carried } : rest;
    this.o.bus.publish("heartbeat", msg);
  }

  private onHeartbeat(msg: HeartbeatMessage, origin: string | undefined): void {
    if (msg.peer_key === this.o.self.peerKey) return;
    const heard = this.membership.heard(msg, origin);
    if (!heard) return;
    const { known, hb } = heard;
    // A process not heard before has none of this node's links yet: the next heartbeat carries them.
    if (known?.heartbeat.started_at !== msg.started_at) this.linkReport.newPeer();
    if (!known || (hb.is_master && !known.heartbeat.is_master)) this.tick();
    // The master's heartbeat says how far its log goes: a follower behind it asks for the rest.
    const follower = {
      current: this.current,
      isMaster: this.role === "master",
      synced: this.synced,
      index: this.replica.state.index,
    };
    if (behindMaster(hb, follower)) void this.replica.sync(this.replica.state.index + 1);
  }

  private originOf(peerKey: string): string | undefined {
    return this.membership.originOf(peerKey);
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
    const gone = await this.membership.connectionLost(peerKey, startedAt, via, () => this.stopped);
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
    if (this.stopped) return;
    const now = this.o.clock.now();
    const self: Peer = { peer_key: this.o.self.peerKey, started_at: this.o.self.startedAt };
    const d = elect({
      now,
      self,
      upSince: this.upSince,
      current: this.current,
      selfIsMaster: this.role === "master",
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
    if (this.role === "master" && !this.master.handOffs.active) {
      this.master.sequencer.supervise(now, opts.departures ?? true, this.current!.session_id);
    }
    this.membership.forgetSilent(now);
  }

  private setSession(next: { session_id: SessionId; master: Peer }): void {
    const prev = this.current?.session_id ?? null;
    this.current = next;
    this.replica.clearPending();
    if (prev !== next.session_id) {
      this.log.info(
        { previous: prev, session: next.session_id, master: next.master.peer_key },
        "session changed",
      );
      for (const l of this.listeners) l.session?.(prev, next.session_id);
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
        this.current && this.current.master.peer_key !== self.peerKey
          ? this.current.master.peer_key
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
    this.emit(event);
    this.publishHeartbeat();
  }

  private adopt(sessionId: SessionId, master: Peer): void {
    if (this.role === "master") {
      this.log.warn(
        { session: sessionId, master: master.peer_key },
        "stepping down for a more senior master",
      );
      this.stepDown();
    }
    this.setSession({ session_id: sessionId, master });
    // What the new master announced while this node still kept its old session is applied now, so
    // followers do not all ask the new master for its whole log at once (see AnnouncedSession).
    for (const ev of this.announced.take(sessionId, master.peer_key)) this.replica.receive(ev);
    // A node the session does not list yet says at once that it adopted it (the master then adds
    // it); one it lists already says so with its next heartbeat. After a master's death every
    // survivor adopts at once: n extra heartbeats, each to n nodes, in one burst.
    const listed = this.synced && Object.hasOwn(this.replica.state.members, this.nodeId!);
    if (!listed) this.publishHeartbeat();
    if (!this.synced) void this.replica.sync(1);
  }

  // ---- replica ----

  /** An event from the bus: taken or refused by the intake (event-intake.ts), then the replica's. */
  private onEvent(ev: IndexedEvent, origin: string | undefined): void {
    if (this.announced.offer(ev, origin)) return;
    const view = {
      selfKey: this.o.self.peerKey,
      current: this.current,
      originOf: (k: string) => this.originOf(k),
    };
    const d = intakeOf(ev, origin, view);
    if (d.kind === "wait") return;
    if (d.kind === "refuse") {
      this.membership.refuse("event", origin, d.why);
      return;
    }
    if (d.announce && origin !== undefined) this.announced.announce(ev, origin);
    if (d.touch !== undefined) this.membership.touch(d.touch);
    // Treat the announcement as the master's heartbeat so the election rule can adopt it now.
    if (d.announcedMaster && this.membership.announcedMaster(d.announcedMaster, ev.session_id))
      this.tick();
    const now = {
      sessionId: this.current?.session_id,
      isMaster: this.role === "master",
      replicaSession: this.replica.state.session?.session_id,
    };
    if (replicaTakes(ev, now)) this.replica.receive(ev);
  }

  /** The replica applied an event: the agent's side of it, then the listeners. */
  private applied(ev: IndexedEvent, left: string | undefined): void {
    // A node the master declared gone counts as gone here too, until it is heard again.
    if (left !== undefined && left !== this.o.self.peerKey) this.membership.markLost(left);
    if (ev.event.type === "MasterHandedOff") this.handedOff(ev.session_id, ev.event);
    for (const l of this.listeners) l.event?.(ev, this.replica.state);
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
    if (this.current?.session_id !== sessionId) return;
    const master: Peer = { peer_key: e.master_peer_key, started_at: e.master_started_at };
    this.log.info({ session: sessionId, master: master.peer_key }, "master handed off");
    if (this.role === "master") {
      this.master.retire();
      this.role = "follower";
    }
    this.current = { session_id: sessionId, master };
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
    this.role = "master";
  }

  private stepDown(): void {
    this.master.stop();
    this.role = "follower";
  }

  /** Master only: sequence an event, apply it locally, publish it. */
  private emit(event: ControlEvent): IndexedEvent {
    const session = this.current!.session_id;
    const ev: IndexedEvent = {
      index: event.type === "SessionStarted" ? 1 : this.replica.state.index + 1,
      session_id: session,
      at: this.o.clock.now(),
      event,
    };
    this.replica.apply(ev);
    this.master.record(ev);
    return ev;
  }

  /** A command for this node's session while it is its master (the sequencer decides it). */
  private handleCommand(
    sessionId: SessionId,
    from: NodeId,
    cmd: Command,
  ): CommandReply | Promise<CommandReply> {
    const handedOff = this.master.handOffs.reply(sessionId);
    if (handedOff) return handedOff;
    if (this.role !== "master" || sessionId !== this.current?.session_id) return SESSION_CHANGED;
    return this.master.sequencer.command(sessionId, from, cmd);
  }

  /** Sends a command to this session's master; throws ServiceError (session_changed, no_master, ...). */
  command(cmd: Command): Promise<Extract<CommandReply, { ok: true }>> {
    return this.commands.send(cmd);
  }
}
