// Pure: this node's heartbeat, and when a follower hearing its master's heartbeat must ask for the
// events it missed. The agent publishes the one and acts on the other.
import type { HealthEntry, Heartbeat, SessionId } from "@ic/protocol";
import type { Peer } from "@ic/state";
import type { HeartbeatExtras, SelfInfo } from "./agent-options.ts";

export interface HeartbeatInput {
  readonly self: SelfInfo;
  /** What the worker and the node's other parts add (telemetry, runners, health, ...). */
  readonly extras: HeartbeatExtras;
  readonly current: { readonly session_id: SessionId; readonly master: Peer } | null;
  readonly isMaster: boolean;
  /** The replica's last applied index. */
  readonly lastIndex: number;
  readonly now: number;
  /** The master's intent store health (a failing store), when it has one to report. */
  readonly intentHealth: HealthEntry | undefined;
}

export function heartbeatOf(i: HeartbeatInput): Heartbeat {
  const s = i.self;
  return {
    peer_key: s.peerKey,
    name: s.name,
    host: s.host,
    api_url: s.apiUrl,
    started_at: s.startedAt,
    session_id: i.current?.session_id ?? null,
    master_peer_key: i.current?.master.peer_key ?? null,
    is_master: i.isMaster,
    last_index: i.lastIndex,
    sent_at: i.now,
    ...i.extras,
    health: i.intentHealth ? [...i.extras.health, i.intentHealth] : i.extras.health,
  };
}

/**
 * True when the heartbeat is this follower's master's, of its session, and says its log goes
 * further than the (synced) replica. An event is otherwise only re-requested when a later one shows
 * the gap, so a lost last event (dropped while a route reconnects after a partition heals) would
 * leave the replica behind until the next event.
 */
export function behindMaster(
  hb: Pick<Heartbeat, "is_master" | "peer_key" | "session_id" | "last_index">,
  follower: {
    readonly current: { readonly session_id: SessionId; readonly master: Peer } | null;
    readonly isMaster: boolean;
    readonly synced: boolean;
    readonly index: number;
  },
): boolean {
  const cur = follower.current;
  return (
    cur !== null &&
    !follower.isMaster &&
    hb.is_master &&
    hb.peer_key === cur.master.peer_key &&
    hb.session_id === cur.session_id &&
    follower.synced &&
    hb.last_index > follower.index
  );
}
