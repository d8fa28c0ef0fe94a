// The election rule and per-session node ids, as pure functions of what a node has heard.
// Seniority (earliest process start, then peer key) decides both elections and partition heals.
import { createHash } from "node:crypto";
import type { NodeId, SessionId } from "@ic/protocol";

export interface Peer {
  readonly peer_key: string;
  readonly started_at: number;
}

/** Negative when `a` is more senior than `b`. A total order: no two peers tie. */
export function compareSeniority(a: Peer, b: Peer): number {
  if (a.started_at !== b.started_at) return a.started_at - b.started_at;
  return a.peer_key < b.peer_key ? -1 : a.peer_key > b.peer_key ? 1 : 0;
}

export function mostSenior<T extends Peer>(peers: readonly T[]): T | undefined {
  let best: T | undefined;
  for (const p of peers) if (!best || compareSeniority(p, best) < 0) best = p;
  return best;
}

/** Node ids are per session: the same process gets a different id in every session. */
export function nodeIdFor(sessionId: SessionId | string, peerKey: string): NodeId {
  const h = createHash("sha256").update(`${sessionId}\u0000${peerKey}`).digest("hex");
  return `n-${h.slice(0, 12)}` as NodeId;
}

/** What a node has heard recently. `lastHeard` is the time of the last liveness signal. */
export interface HeardPeer extends Peer {
  readonly lastHeard: number;
  /** The session this peer says it masters, when it says it is master. */
  readonly masterOf: string | null;
  /** The session this peer says it is in (master or follower); `masterOf` when left out. */
  readonly session?: string | null;
}

export interface ElectionInput {
  readonly now: number;
  readonly self: Peer;
  /** Time this node started looking for a cluster (formation wait starts here). */
  readonly upSince: number;
  /** Session this node is in and its master; null before the first session. */
  readonly current: { readonly session_id: string; readonly master: Peer } | null;
  /** Whether this node is master of `current`. */
  readonly selfIsMaster: boolean;
  /** Other peers (never self). */
  readonly peers: readonly HeardPeer[];
  /** DEFAULT_ELECTION_TIMEOUT: master silence that triggers an election; also the formation wait. */
  readonly electionTimeoutMs: number;
}

export type ElectionDecision =
  | { readonly kind: "stay" }
  | { readonly kind: "wait"; readonly candidate: string }
  | { readonly kind: "start_session" }
  | { readonly kind: "adopt"; readonly session_id: string; readonly master: Peer };

/**
 * Rules, in order:
 * 1. Among sessions whose master was heard within the election timeout (self included), the one
 *    with the most live nodes in it (master and followers heard within the election timeout, self
 *    included) wins, ties going to the most senior master; a node in any other session (or none)
 *    adopts it. This is how a healed partition converges: the side that kept more of the cluster
 *    keeps its session (and what it placed meanwhile), the other side's master steps down. There is
 *    no majority rule while cut: every side elects a master (split-brain), so the heal must not
 *    hand the cluster to whichever side happens to hold the senior node -- a master cut off alone
 *    has dropped every other node's instances from its session. The outcome cannot flap: a node
 *    always hears its own side completely, so it never counts a foreign session larger than it is;
 *    a session only grows as others adopt it; seniority never changes while a process lives.
 * 2. With no live master anywhere, once the election timeout has passed since this node came up
 *    (or since its master fell silent), the most senior live peer starts a new session; the others wait.
 */
export function elect(input: ElectionInput): ElectionDecision {
  const { now, self, electionTimeoutMs: t } = input;
  const live = input.peers.filter((p) => now - p.lastHeard <= t);
  const masters: { session_id: string; master: Peer }[] = live
    .filter((p) => p.masterOf !== null)
    .map((p) => ({
      session_id: p.masterOf as string,
      master: { peer_key: p.peer_key, started_at: p.started_at },
    }));
  if (input.selfIsMaster && input.current)
    masters.push({ session_id: input.current.session_id, master: self });
  if (masters.length > 0) {
    const size = (session: string): number =>
      live.filter((p) => (p.session ?? p.masterOf) === session).length +
      (input.current?.session_id === session ? 1 : 0);
    let win = masters[0]!;
    let winSize = size(win.session_id);
    for (const m of masters) {
      const n = size(m.session_id);
      if (n > winSize || (n === winSize && compareSeniority(m.master, win.master) < 0)) {
        win = m;
        winSize = n;
      }
    }
    if (input.current?.session_id === win.session_id) return { kind: "stay" };
    return { kind: "adopt", session_id: win.session_id, master: win.master };
  }
  // No live master is heard. Wait out the formation window / master-silence window first.
  if (input.current && !input.selfIsMaster) {
    const masterPeer = input.peers.find((p) => p.peer_key === input.current!.master.peer_key);
    const silentSince = masterPeer ? masterPeer.lastHeard : 0;
    if (now - silentSince <= t) return { kind: "stay" };
  } else if (!input.current && now - input.upSince < t) {
    return { kind: "wait", candidate: "" };
  }
  const candidate = mostSenior<Peer>([self, ...live]);
  if (candidate && candidate.peer_key === self.peer_key) return { kind: "start_session" };
  return { kind: "wait", candidate: candidate?.peer_key ?? "" };
}
