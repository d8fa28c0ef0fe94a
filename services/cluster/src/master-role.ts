// The master role's parts on this node: the sequencer (with the intent keeper when there is an
// intent store), the session's event log and the catch-up answers served from it, the bus endpoints,
// and the hand-off. Each is built here from the agent's other parts (the replica, membership, the
// roles, the stream), never from the agent itself. The agent decides when this node is the master
// (the election); this says what serving, stepping down and handing off do to the parts, and how an
// event is sequenced: `publish`, the one way an event enters a session.
import { randomUUID } from "node:crypto";
import type {
  Command,
  CommandReply,
  ControlEvent,
  IndexedEvent,
  NodeId,
  SessionId,
} from "@ic/protocol";
import type { IdKind } from "@ic/state";
import type { AgentOptions } from "./agent-options.ts";
import { HandOff } from "./hand-off.ts";
import { IntentKeeper, SESSION_CHANGED } from "./intent-keeper.ts";
import { MasterEndpoints } from "./master-endpoints.ts";
import { DEFAULT_LOG_BOUNDS, MasterLog } from "./master-log.ts";
import type { Membership } from "./membership.ts";
import type { Replica } from "./replica.ts";
import { defaultSyncBudget, SyncServer } from "./replica-sync.ts";
import type { Roles } from "./roles.ts";
import { Sequencer } from "./sequencer.ts";
import type { AgentStream } from "./stream.ts";

/** The parts the master role is built from (the agent's). */
export interface MasterParts {
  readonly replica: Replica;
  readonly membership: Membership;
  readonly roles: Roles;
  readonly stream: AgentStream;
}

export class MasterRole {
  /** Commands, tasks, joins and departures, re-placements (sequencer.ts). */
  readonly sequencer: Sequencer;
  /** A planned hand-off of the session (hand-off.ts). */
  readonly handOffs: HandOff;
  private readonly masterLog: MasterLog;
  private readonly syncServer: SyncServer;
  private readonly endpoints: MasterEndpoints;

  constructor(
    private readonly parts: MasterParts,
    private readonly o: AgentOptions,
  ) {
    const { replica, membership, roles, stream } = parts;
    const log = o.log.child({ component: "cluster" });
    const publish = (e: ControlEvent) => void this.publish(e);
    const intents = o.intents
      ? new IntentKeeper({
          store: o.intents,
          sequencer: {
            decide: (from, cmd, ids, now) => this.sequencer.decide(from, cmd, ids, now),
            accept: (d) => this.sequencer.accept(d),
          },
          roles,
          replica,
          publish,
          clock: o.clock,
          log,
          newId,
        })
      : undefined;
    this.sequencer = new Sequencer({
      replica,
      publish,
      peers: { live: () => membership.live(), get: (k) => membership.get(k) },
      stream,
      selfKey: o.self.peerKey,
      livenessTimeoutMs: o.timings.livenessTimeoutMs,
      clock: o.clock,
      log,
      newId,
      taskBounds: o.taskBounds,
      memory: o.memory,
      intents,
      scaleWindows: o.scaleWindows,
    });
    this.masterLog = new MasterLog({ ...DEFAULT_LOG_BOUNDS, ...o.logBounds });
    this.syncServer = new SyncServer(this.masterLog, () => replica.state, {
      budgetBytes: o.syncBudgetBytes ?? defaultSyncBudget(o.bus.maxPayload),
      snapshotGap: o.snapshotGap ?? 5000,
    });
    this.endpoints = new MasterEndpoints(o.bus, {
      members: () => replica.state.members,
      originOf: (k) => membership.originOf(k),
      refuse: (what, origin, why) => membership.refuse(what, origin, why),
      sessionId: () => roles.current?.session_id ?? null,
      command: (session, from, cmd) => this.command(session, from, cmd),
      sync: (req) => this.syncServer.answer(req),
    });
    this.handOffs = new HandOff({
      selfKey: o.self.peerKey,
      livenessTimeoutMs: o.timings.livenessTimeoutMs,
      log,
      clock: o.clock,
      roles,
      replica,
      peers: membership,
      intentsSettled: () => intents?.settled(),
      publish,
    });
  }

  /**
   * Sequences an event of the session this node masters: the next index, applied to the replica
   * (which tells the stream), into the log for catch-up, then on the bus.
   */
  publish(event: ControlEvent): IndexedEvent {
    const { replica, roles } = this.parts;
    const ev: IndexedEvent = {
      index: event.type === "SessionStarted" ? 1 : replica.state.index + 1,
      session_id: roles.current!.session_id,
      at: this.o.clock.now(),
      event,
    };
    replica.apply(ev);
    this.masterLog.append(ev, Buffer.byteLength(JSON.stringify(ev)));
    // A publish that fails (logged and counted by the bus) leaves followers a gap: they catch up
    // through sync, in pages, at the next event or master heartbeat.
    this.o.bus.publish("events", ev);
    return ev;
  }

  /** A command for this node's session while it masters it (the sequencer decides it). */
  command(sessionId: SessionId, from: NodeId, cmd: Command): CommandReply | Promise<CommandReply> {
    const handedOff = this.handOffs.reply(sessionId);
    if (handedOff) return handedOff;
    if (!this.parts.roles.masters(sessionId)) return SESSION_CHANGED;
    return this.sequencer.command(sessionId, from, cmd);
  }

  /** Serves a session as its master from a clean slate (a session it started, or one handed to it). */
  serve(sessionId: SessionId): void {
    this.stop();
    this.handOffs.clear();
    this.masterLog.reset();
    this.syncServer.reset();
    this.sequencer.intents?.reset();
    this.endpoints.serve(sessionId);
  }

  /** Stops serving at once (a more senior master took over, or a new session starts). */
  stop(): void {
    this.endpoints.close();
    this.sequencer.clear();
  }

  /** Handed off: the endpoints stay a while, so a follower that asked this node still gets an answer. */
  retire(): void {
    this.endpoints.retire();
    this.sequencer.clear();
  }

  /** The node stops: every endpoint goes, retired ones too. */
  close(): void {
    this.endpoints.close();
    this.endpoints.closeRetired();
  }
}

const ID_PREFIX: Readonly<Record<IdKind, string>> = { deployment: "d", task: "t", instance: "i" };
/** Fresh ids for what the master creates (deployments, tasks, re-placed instances). */
function newId(kind: IdKind): string {
  return `${ID_PREFIX[kind]}-${randomUUID()}`;
}
