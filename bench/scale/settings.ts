// bench/scale's settings (env; see main.ts's header), the agents' timings and what one size measures.
import { resolve } from "node:path";
import { ConfigSchema } from "@ic/config";
import type { AgentTimings } from "@ic/cluster";
import type { Counters } from "./bus.ts";
import type { Sizes } from "./wire.ts";

export const SIZES = (process.env.BENCH_SIZES ?? "10,25,50,100").split(",").map(Number);
export const SERVERS = Number(process.env.BENCH_SERVERS ?? 4);
/** Agents per shared host process (the non-senior ones). */
export const PER_HOST = Number(process.env.BENCH_PER_HOST ?? 25);
/** Master kills found by the timeouts alone (heartbeats stop). */
export const KILLS = Number(process.env.BENCH_KILLS ?? 3);
/**
 * Then master kills with the fast failure signal: every survivor is told at once that its
 * connection to the master dropped (what node.ts's watch connection does: ClusterAgent.connectionLost).
 */
export const FAST_KILLS = Number(process.env.BENCH_FAST_KILLS ?? 2);
export const SETTLE_S = Number(process.env.BENCH_SETTLE_S ?? 6);
export const WINDOW_S = Number(process.env.BENCH_WINDOW_S ?? 20);
/** Two-node instances placed per node (the workload that gives heartbeats runners and the state instances). */
export const INSTANCES_PER_NODE = Number(process.env.BENCH_INSTANCES_PER_NODE ?? 0.25);
export const PROFILE_DIR = process.env.BENCH_PROFILE
  ? resolve(process.env.BENCH_PROFILE)
  : undefined;
const cluster = ConfigSchema.shape.cluster.parse({});
export const TIMINGS: AgentTimings = {
  heartbeatMs: cluster.heartbeat_ms,
  livenessTimeoutMs: cluster.liveness_timeout_ms,
  electionTimeoutMs: cluster.election_timeout_ms,
};

export interface KillSample {
  readonly fast: boolean;
  /** SIGKILL -> every survivor synced in one new session without the victim (ms). */
  converged: number;
  /** SIGKILL -> the successor reports itself master of the new session (ms). */
  elected: number;
  /** How long the successor had not heard the victim at the kill (ms). */
  silentAtKill: number | null;
  /** The successor's CPU from the kill to convergence (ms). */
  successorCpu: number;
  /** The longest a heartbeat took from its sender to an agent between the kill and convergence (ms). */
  lagMax: number;
}

export interface Result {
  n: number;
  layout: string;
  join: number;
  elected: number;
  masterJoinCpu: number;
  placed: number;
  refused: string[];
  runners: number;
  bus: Counters;
  masterPct: number;
  perNodePct: number;
  natsPct: number;
  seniorFollowerPct: number;
  sizesFollower: Sizes;
  /** The follower's GET /state document and its topology.links part (bytes). */
  stateDoc: number;
  stateDocLinks: number;
  kills: KillSample[];
  /**
   * Heartbeat send -> handled by an agent, steady state: in the processes of one agent (the
   * master's successors) and in the shared ones (p99 of the worst process, max; ms).
   */
  lagAlone: Lag;
  lagShared: Lag;
  /** Slow-consumer events the nats-servers counted over the whole size. */
  slowConsumers: number;
  /** The machine's 1-minute load average at the start and the end of this size. */
  load: [number, number];
}

/** Heartbeat sent -> handled (ms): p99 of the worst process, and the max. */
export interface Lag {
  readonly p99: number;
  readonly max: number;
}
