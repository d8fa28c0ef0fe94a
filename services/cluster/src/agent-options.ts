// What a cluster agent is built from (its bus, clock, identity, timings, bounds and the intent
// store) and what it tells its listeners.
import type { Bus } from "@ic/bus";
import type { Logger } from "@ic/log";
import type { MemoryModel } from "@ic/placement";
import type {
  Clock,
  ControlState,
  Heartbeat,
  IndexedEvent,
  IntentStore,
  SessionId,
} from "@ic/protocol";
import type { ScaleWindows, TaskBounds } from "@ic/state";
import type { LogBounds } from "./master-log.ts";
import type { ProbeSettings } from "./membership.ts";

export interface SelfInfo {
  readonly peerKey: string;
  readonly name: string;
  readonly host: string;
  readonly apiUrl: string;
  readonly startedAt: number;
}

export interface AgentTimings {
  readonly heartbeatMs: number;
  readonly livenessTimeoutMs: number;
  readonly electionTimeoutMs: number;
}

/** What the worker contributes to each heartbeat. */
export type HeartbeatExtras = Pick<Heartbeat, "telemetry" | "links" | "runners" | "health"> &
  Partial<Pick<Heartbeat, "loop_delay" | "pulls" | "outstanding">>;

export interface AgentOptions {
  readonly bus: Bus;
  readonly log: Logger;
  readonly clock: Pick<Clock, "now">;
  readonly self: SelfInfo;
  readonly timings: AgentTimings;
  readonly extras: () => HeartbeatExtras;
  /** What the master keeps of its log for followers' catch-up (older gaps get a snapshot). */
  readonly logBounds?: Partial<LogBounds>;
  /** Largest sync reply in bytes (default: a quarter of the bus's max_payload, at most 256 KiB). */
  readonly syncBudgetBytes?: number;
  /** A follower further behind than this many events is sent a snapshot (default 5000). */
  readonly snapshotGap?: number;
  /** How long load must stay high (low) before a replica set that follows load grows (shrinks). */
  readonly scaleWindows?: Partial<ScaleWindows>;
  /** Bounds of the master's open-task table (an end report lost with its gateway expires). */
  readonly taskBounds?: Partial<TaskBounds>;
  /**
   * Where the operator's intent is kept durably (deployments, registered models). The master
   * writes each change there before sequencing it, and restores the replica from it when it starts
   * a session. Absent: intent lives only in the replicas (it survives failover, not a full restart).
   */
  readonly intents?: IntentStore;
  readonly commandTimeoutMs?: number;
  /** Memory model overrides (context size), as the gateway uses: words the re-check's refusals. */
  readonly memory?: Partial<MemoryModel>;
  /** Liveness probes after a dropped connection (default DEFAULT_PROBE). */
  readonly probe?: ProbeSettings;
  /** Unchanged links still go out every this many heartbeats (default DEFAULT_LINKS_REFRESH). */
  readonly linksRefresh?: number;
}

export type AgentListener = {
  /** Every applied event, in order (SessionStarted included). */
  event?: (ev: IndexedEvent, state: ControlState) => void;
  /** The replica was replaced by a master snapshot (compacted history). */
  snapshot?: (state: ControlState) => void;
  /** The session this node belongs to changed (previous is null on first join). */
  session?: (previous: SessionId | null, next: SessionId) => void;
};
