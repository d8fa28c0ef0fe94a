// The narrow interfaces the gateway needs from the node it runs in, wired in the launcher.
import type {
  Command,
  CommandReply,
  ControlState,
  Heartbeat,
  IndexedEvent,
  NodeId,
  SessionId,
} from "@ic/protocol";

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
