// Which heartbeats carry the sender's measured links. A node measures a link to every live peer, so
// links are the O(n) part of a heartbeat and, with every node hearing every heartbeat, made the bus
// carry n³ bytes (bench/scale). They change rarely: a heartbeat now carries them only when they
// changed beyond the measurement noise, when the sender heard a peer it had not heard before (which
// has none of its links yet), and every `refreshEvery`-th heartbeat (a lost message heals).
//
// Invariants: receivers keep the last links of the same process (started_at) and replace them
// whenever a heartbeat carries some; the first heartbeat of a process always carries them.

import type { Link } from "@ic/protocol";

/** A link's round trip counts as changed beyond this much: absolute (ms) or relative, whichever larger. */
export const RTT_TOLERANCE_MS = 0.5;
export const RTT_TOLERANCE_RATIO = 0.25;
/** Links go out at least every this many heartbeats. */
export const DEFAULT_LINKS_REFRESH = 15;

/** Whether `current` differs from what was sent last: another set of peers, or a round trip moved. */
export function linksChanged(sent: ReadonlyMap<string, number>, current: readonly Link[]): boolean {
  if (sent.size !== current.length) return true;
  for (const l of current) {
    const was = sent.get(l.peer_key);
    if (was === undefined) return true;
    if (Math.abs(l.rtt_ms - was) > Math.max(RTT_TOLERANCE_MS, was * RTT_TOLERANCE_RATIO))
      return true;
  }
  return false;
}

export class LinkReport {
  /** Round trips as last sent, by peer; undefined before the first heartbeat. */
  private sent: Map<string, number> | undefined;
  private sinceSent = 0;
  private owed = false;

  constructor(private readonly refreshEvery = DEFAULT_LINKS_REFRESH) {}

  /** A peer (or a new process of one) was heard for the first time: it needs this node's links. */
  newPeer(): void {
    this.owed = true;
  }

  /** The links to put in the next heartbeat, or undefined to leave them out. */
  next(current: readonly Link[]): Link[] | undefined {
    this.sinceSent++;
    const due =
      this.sent === undefined ||
      this.owed ||
      this.sinceSent >= this.refreshEvery ||
      linksChanged(this.sent, current);
    if (!due) return undefined;
    this.sent = new Map(current.map((l) => [l.peer_key, l.rtt_ms]));
    this.sinceSent = 0;
    this.owed = false;
    return [...current];
  }
}

/**
 * The links to keep for a peer's heartbeat: its own when it carries them; otherwise the last ones
 * of the same process, or none for a process not heard before (they follow within a refresh).
 */
export function resolveLinks(
  carried: Link[] | undefined,
  known: { readonly started_at: number; readonly links: Link[] } | undefined,
  startedAt: number,
): Link[] {
  if (carried) return carried;
  if (known && known.started_at === startedAt) return known.links;
  return [];
}
