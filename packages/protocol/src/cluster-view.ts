// What a service may ask of this node's cluster agent: its view of the session, the control state,
// live peers, and master commands. The gateway, the store routes and observability take it; the
// node passes its ClusterAgent.
import type { ControlState, IndexedEvent } from "./cluster.ts";
import type { Command, CommandReply } from "./commands.ts";
import type { NodeId, SessionId } from "./ids.ts";
import type { Heartbeat } from "./telemetry.ts";

export interface PeerView {
  readonly heartbeat: Heartbeat;
  readonly lastHeard: number;
}

export interface ClusterView {
  readonly peerKey: string;
  readonly synced: boolean;
  readonly isMaster: boolean;
  readonly sessionId: SessionId | null;
  readonly nodeId: NodeId | null;
  snapshot(): ControlState;
  /** Peers heard within the liveness timeout, self included. */
  livePeers(): PeerView[];
  command(cmd: Command): Promise<Extract<CommandReply, { ok: true }>>;
  on(listener: {
    event?: (ev: IndexedEvent, s: ControlState) => void;
    session?: (prev: SessionId | null, next: SessionId) => void;
  }): () => void;
}
