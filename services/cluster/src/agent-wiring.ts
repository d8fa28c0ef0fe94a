// How the cluster agent's parts are built around it: the master's sequencer (with the intent
// keeper when there is an intent store), its log, catch-up server, bus endpoints and hand-off, the
// replica, and the command client. Each part reaches the
// agent only through AgentCore, the few things it reads of it and the few it asks of it.
import { randomUUID } from "node:crypto";
import type {
  Command,
  CommandReply,
  ControlEvent,
  ControlState,
  IndexedEvent,
  NodeId,
  SessionId,
} from "@ic/protocol";
import type { IdKind, Peer } from "@ic/state";
import type { Logger } from "@ic/log";
import type { AgentOptions } from "./agent-options.ts";
import { CommandClient } from "./command-client.ts";
import { IntentKeeper } from "./intent-keeper.ts";
import type { PeerView } from "./membership.ts";
import { Replica } from "./replica.ts";
import { Sequencer } from "./sequencer.ts";
import { HandOff } from "./hand-off.ts";
import { MasterEndpoints } from "./master-endpoints.ts";
import { DEFAULT_LOG_BOUNDS, MasterLog } from "./master-log.ts";
import { defaultSyncBudget, SyncServer } from "./replica-sync.ts";

/** What the agent's parts read of it and ask of it. */
export interface AgentCore {
  readonly log: Logger;
  isMaster(): boolean;
  current(): { readonly session_id: SessionId; readonly master: Peer } | null;
  state(): ControlState;
  synced(): boolean;
  stopped(): boolean;
  /** Master only: sequence an event, apply it, publish it. */
  emit(event: ControlEvent): void;
  livePeers(): PeerView[];
  peer(peerKey: string): PeerView | undefined;
  originOf(peerKey: string): string | undefined;
  /** A command for the session this node masters (answered here when the master is this node). */
  handle(sessionId: SessionId, from: NodeId, cmd: Command): CommandReply | Promise<CommandReply>;
  /** The replica applied an event (`left`: the peer a NodeLeft took out). */
  applied(ev: IndexedEvent, left: string | undefined): void;
  /** The replica was replaced by a master snapshot. */
  snapshotInstalled(state: ControlState): void;
  /** A message from a connection that may not send it: refused and counted (membership.ts). */
  refuse(what: string, origin: string | undefined, why: string): void;
}

/** The master role's sequencing, with the intent store when there is one. */
export function sequencerFor(core: AgentCore, o: AgentOptions): Sequencer {
  const master = {
    mastering: (session: SessionId) => core.isMaster() && core.current()?.session_id === session,
    state: () => core.state(),
    emit: (e: ControlEvent) => core.emit(e),
    livePeers: () => core.livePeers(),
    peer: (peerKey: string) => core.peer(peerKey),
  };
  const intents: IntentKeeper | undefined = o.intents
    ? new IntentKeeper({
        store: o.intents,
        master: {
          ...master,
          decide: (from, cmd, ids, now) => sequencer.decide(from, cmd, ids, now),
          accept: (d) => sequencer.accept(d),
        },
        clock: o.clock,
        log: core.log,
        newId,
      })
    : undefined;
  const sequencer: Sequencer = new Sequencer({
    master,
    selfKey: o.self.peerKey,
    livenessTimeoutMs: o.timings.livenessTimeoutMs,
    clock: o.clock,
    log: core.log,
    newId,
    taskBounds: o.taskBounds,
    memory: o.memory,
    intents,
  });
  return sequencer;
}

/** The replica, telling the agent what it applied. */
export function replicaFor(core: AgentCore, o: AgentOptions): Replica {
  return new Replica({
    host: {
      session: () => core.current(),
      isMaster: () => core.isMaster(),
      originOf: (peerKey) => core.originOf(peerKey),
      applied: (ev, left) => core.applied(ev, left),
      snapshotInstalled: (state) => core.snapshotInstalled(state),
    },
    bus: o.bus,
    log: core.log,
  });
}

/** This node's commands to the master. */
export function commandClientFor(core: AgentCore, o: AgentOptions): CommandClient {
  return new CommandClient({
    agent: {
      current: () => core.current(),
      isMaster: () => core.isMaster(),
      synced: () => core.synced(),
      stopped: () => core.stopped(),
      peer: (peerKey) => core.peer(peerKey),
      originOf: (peerKey) => core.originOf(peerKey),
      handle: (session, from, cmd) => core.handle(session, from, cmd),
    },
    selfKey: o.self.peerKey,
    bus: o.bus,
    clock: o.clock,
    commandTimeoutMs: o.commandTimeoutMs,
  });
}

/** The master's log of its session's events, and the catch-up answers followers get from it. */
export function syncServerFor(
  core: AgentCore,
  o: AgentOptions,
): { masterLog: MasterLog; syncServer: SyncServer } {
  const masterLog = new MasterLog({ ...DEFAULT_LOG_BOUNDS, ...o.logBounds });
  const syncServer = new SyncServer(masterLog, () => core.state(), {
    budgetBytes: o.syncBudgetBytes ?? defaultSyncBudget(o.bus.maxPayload),
    snapshotGap: o.snapshotGap ?? 5000,
  });
  return { masterLog, syncServer };
}

/** The master role's bus endpoints: commands and catch-up for its session. */
export function endpointsFor(
  core: AgentCore,
  o: AgentOptions,
  syncServer: SyncServer,
): MasterEndpoints {
  return new MasterEndpoints(o.bus, {
    members: () => core.state().members,
    originOf: (peerKey) => core.originOf(peerKey),
    refuse: (what, origin, why) => core.refuse(what, origin, why),
    sessionId: () => core.current()?.session_id ?? null,
    command: (session, from, cmd) => core.handle(session, from, cmd),
    sync: (req) => syncServer.answer(req),
  });
}

/** A planned hand-off of the session this node masters (hand-off.ts). */
export function handOffFor(core: AgentCore, o: AgentOptions, sequencer: Sequencer): HandOff {
  return new HandOff({
    selfKey: o.self.peerKey,
    livenessTimeoutMs: o.timings.livenessTimeoutMs,
    log: core.log,
    mastering: () => (core.isMaster() && !core.stopped() ? core.current()?.session_id : undefined),
    state: () => core.state(),
    peer: (peerKey) => core.peer(peerKey),
    now: () => o.clock.now(),
    intentsSettled: () => sequencer.intents?.settled(),
    emit: (e) => core.emit(e),
  });
}

const ID_PREFIX: Readonly<Record<IdKind, string>> = { deployment: "d", task: "t", instance: "i" };
/** Fresh ids for what the master creates (deployments, tasks, re-placed instances). */
function newId(kind: IdKind): string {
  return `${ID_PREFIX[kind]}-${randomUUID()}`;
}
