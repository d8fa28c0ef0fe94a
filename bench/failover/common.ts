// Failover bench, shared by its scenarios and its report: the timings, the samples' shapes, the
// nodes' /state documents and JSON log lines.
import type { NodeProcess } from "@ic/testkit";

export const RUNS = Number(process.env.BENCH_RUNS ?? 5);
/** One-way delay the relays add on every route, per setting (0: direct routes, no relay). */
export const DELAYS = [0, 20] as const;
export const TIMINGS = {
  heartbeat_ms: 2000,
  liveness_timeout_ms: 4000,
  election_timeout_ms: 3000,
  info_pending_wait_ms: 15000,
};
/** The cluster agent's tick (services/cluster/src/cluster-agent.ts): election timeout / 10, 20..250 ms. */
export const TICK_MS = Math.max(20, Math.min(250, TIMINGS.election_timeout_ms / 10));
export const POLL_MS = 20;
/** After the kill, when the survivors' view of the victim is read (past any delayed in-flight message). */
export const SILENCE_PROBE_MS = 100;

export interface Doc {
  session: { session_id: string } | null;
  this_node: { name: string; synced: boolean; is_master: boolean };
  node_identities: { node_id: string; name: string; is_master: boolean }[];
  topology: { nodes: { name: string; last_heard_ms_ago: number }[] };
}

export type Kind = "master" | "worker" | "cut";

/** Milliseconds after the kill (or the cut), per run; undefined where a step does not apply or was not seen. */
export interface Sample {
  /** Every survivor synced in one new session (master kills only). */
  session?: number;
  /** The victim gone from node_identities on every survivor (master kills: in the new session). */
  gone: number;
  /** How long the deciding survivor (the master after the kill) had not heard the victim at the kill. */
  silentAtKill: number;
  /** The deciding survivor's "peer gone: its connection dropped ..." line (the fast path). */
  detected?: number;
  /** The new master's "elected master; starting session" log line (master kills). */
  elected?: number;
  /** The other survivor's "session changed" line for the new session (master kills). */
  adopted?: number;
  /** The master's "node lost (...)" line for the victim. */
  lost?: number;
  /** Why the victim was declared gone: "connection lost" (fast path) or "heartbeat timeout". */
  reason?: string;
  /** How each probe of the fast path failed ("no responder", "timed out"). */
  probes?: string[];
  /** Worker kills: the requests open on the victim's instance, when each ended and how. */
  requests?: { kind: "stream" | "plain"; ended: number; outcome: string }[];
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function states(nodes: readonly NodeProcess[]): Promise<Doc[]> {
  return Promise.all(nodes.map((n) => n.get<Doc>("/state", 5000)));
}

export interface LogLine {
  time?: string;
  msg?: string;
  session?: string;
  /** "peer gone" lines: why each probe failed. */
  probes?: string[];
}

/** Time (ms since the epoch) of the first log line at or after `since` that `match` accepts. */
export function logged(
  node: NodeProcess,
  since: number,
  match: (l: LogLine) => boolean,
): number | undefined {
  for (const raw of node.logLines) {
    if (!raw.startsWith("{")) continue;
    let l: LogLine;
    try {
      l = JSON.parse(raw) as LogLine;
    } catch {
      continue;
    }
    const t = l.time ? Date.parse(l.time) : NaN;
    if (t >= since && match(l)) return t;
  }
  return undefined;
}

export const CHAT_POLL_MS = 50;
/** The deadline for a model to answer again (or for the first time); a run past it throws. */
export const SERVE_DEADLINE_MS = 60_000;

export interface ChatBody {
  usage?: { completion_tokens?: number };
  error?: { code?: string };
}

export function isMaster(d: Doc): boolean {
  return d.this_node.is_master;
}

export function brief(d: Doc): unknown {
  return {
    node: d.this_node.name,
    session: d.session?.session_id ?? null,
    synced: d.this_node.synced,
    members: d.node_identities.map((n) => n.name),
  };
}

/** Every kill setting of a run, in order: master and worker kills per route delay, then the cut. */
export const PLAN: [Kind, number][] = [
  ...DELAYS.flatMap((d) => (["master", "worker"] as const).map((k): [Kind, number] => [k, d])),
  ["cut", 0],
];
