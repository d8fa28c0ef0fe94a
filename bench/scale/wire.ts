// The IPC messages between bench/scale's orchestrator (main.ts) and its agent hosts (agent-host.ts).
// One request at a time per kind; status updates flow from the hosts unasked.
import type { AgentTimings, PeerView } from "@ic/cluster";
import type { ControlState, NodeId, SessionId } from "@ic/protocol";

export interface AgentSpec {
  /** Index in the cluster (0 = the most senior). */
  readonly index: number;
  readonly name: string;
  readonly peerKey: string;
  readonly startedAt: number;
  readonly natsUrl: string;
}

export type ToHost =
  | {
      t: "init";
      agents: AgentSpec[];
      user: string;
      password: string;
      timings: AgentTimings;
      seed: number;
    }
  | { t: "start" }
  /** Peer keys that must not be members for an agent to count as converged (the killed ones). */
  | { t: "watch"; gone: string[] }
  | { t: "sizes" }
  /** Master host: registers models and places `instances` two-node instances (as the gateway does). */
  | { t: "workload"; instances: number }
  /**
   * Every agent reports RunnerReady for the ranks its replica assigns to it (as a worker does),
   * once its replica reached `index` (the master's after the workload).
   */
  | { t: "report-runners"; index: number }
  /** Every hosted agent's connection to `peerKey` dropped (the watch connection's signal). */
  | { t: "connection-lost"; peerKey: string; startedAt: number }
  /** When the host's first agent last heard `peerKey` (its Date.now()). */
  | { t: "heard"; peerKey: string }
  | { t: "profile-start" }
  | { t: "profile-stop"; file: string }
  /** Heartbeat delivery lag (send -> handled here) since the last ask. */
  | { t: "lag" }
  /** Log lines by message since the last ask. */
  | { t: "logs" }
  | { t: "stop" };

export interface AgentStatus {
  readonly i: number;
  /** When this status began (the host's Date.now(), same machine clock as the orchestrator). */
  readonly at: number;
  readonly session: string | null;
  readonly synced: boolean;
  /** Members of the replica's session (0 while not synced). */
  readonly members: number;
  /** No watched (killed) peer is a member. */
  readonly clean: boolean;
  readonly master: boolean;
}

/** An agent's view as the gateway reads it (ClusterView's data), sent whole. */
export interface AgentView {
  readonly peerKey: string;
  readonly name: string;
  readonly synced: boolean;
  readonly isMaster: boolean;
  readonly sessionId: SessionId | null;
  readonly nodeId: NodeId | null;
  readonly snapshot: ControlState;
  readonly livePeers: PeerView[];
}

export interface Sizes {
  /** A heartbeat as published (JSON bytes), and the part its links take. */
  readonly heartbeat: number;
  readonly heartbeatLinks: number;
  /** What the agent's GET /state is built from (the orchestrator builds it: stateDocument). */
  readonly view: AgentView;
  /** The replica (ControlState) as JSON. */
  readonly replica: number;
  /** A real `masterSync` request from index 1 (what a joining or adopting node fetches). */
  readonly syncFromStart: number;
  readonly events: number;
}

export type FromHost =
  | { t: "ready" }
  | { t: "started"; at: number }
  | { t: "status"; updates: AgentStatus[] }
  | { t: "sizes"; sizes: Sizes }
  | { t: "workload"; placed: number; refused: string[]; index: number }
  | { t: "runners"; reported: number }
  | { t: "heard"; at: number | null }
  | { t: "profiled"; file: string }
  | { t: "watching" }
  | { t: "logs"; counts: Record<string, number> }
  | { t: "lag"; n: number; p50: number; p99: number; max: number }
  | { t: "error"; message: string };
