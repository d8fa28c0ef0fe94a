// The master role's parts on this node: the sequencer, the session's event log and the catch-up
// answers served from it, the bus endpoints, and the hand-off. The agent decides when this node is
// the master (the election); this says what becoming it, stepping down, handing off and sequencing
// an event do to the parts.
import type { IndexedEvent, SessionId } from "@ic/protocol";
import type { AgentOptions } from "./agent-options.ts";
import {
  endpointsFor,
  handOffFor,
  sequencerFor,
  syncServerFor,
  type AgentCore,
} from "./agent-wiring.ts";
import type { HandOff } from "./hand-off.ts";
import type { MasterEndpoints } from "./master-endpoints.ts";
import type { MasterLog } from "./master-log.ts";
import type { SyncServer } from "./replica-sync.ts";
import type { Sequencer } from "./sequencer.ts";

export class MasterRole {
  /** Commands, tasks, joins and departures, re-placements (sequencer.ts). */
  readonly sequencer: Sequencer;
  /** A planned hand-off of the session (hand-off.ts). */
  readonly handOffs: HandOff;
  private readonly masterLog: MasterLog;
  private readonly syncServer: SyncServer;
  private readonly endpoints: MasterEndpoints;

  constructor(
    core: AgentCore,
    private readonly o: AgentOptions,
  ) {
    this.sequencer = sequencerFor(core, o);
    const sync = syncServerFor(core, o);
    this.masterLog = sync.masterLog;
    this.syncServer = sync.syncServer;
    this.endpoints = endpointsFor(core, o, this.syncServer);
    this.handOffs = handOffFor(core, o, this.sequencer);
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

  /** An event this master sequenced and applied: into its log for catch-up, then on the bus. */
  record(ev: IndexedEvent): void {
    this.sequencer.emitted(ev.event);
    this.masterLog.append(ev, Buffer.byteLength(JSON.stringify(ev)));
    // A publish that fails (logged and counted by the bus) leaves followers a gap: they catch up
    // through sync, in pages, at the next event or master heartbeat.
    this.o.bus.publish("events", ev);
  }

  /** The node stops: every endpoint goes, retired ones too. */
  close(): void {
    this.endpoints.close();
    this.endpoints.closeRetired();
  }
}
