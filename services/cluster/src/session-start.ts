// Pure: what a new session starts from, and whom a planned hand-off goes to. The agent calls them
// with its replica, its own heartbeat and the live peers' (session-start.test.ts has their tables).
import type {
  ControlEvent,
  ControlState,
  Heartbeat,
  Member,
  NodeId,
  SessionId,
} from "@ic/protocol";
import { compareSeniority, nodeIdFor } from "@ic/state";
import type { Peer } from "@ic/state";
import { heardAt } from "./membership.ts";
import type { PeerView } from "./membership.ts";
import { memberFor } from "./sequencer.ts";

export interface SessionStartInput {
  readonly sessionId: SessionId;
  readonly now: number;
  /** This node's heartbeat: it is the new session's master. */
  readonly self: Heartbeat;
  /** Peers heard within the liveness timeout (self excluded or not: it is skipped). */
  readonly live: readonly PeerView[];
  /** The master whose silence called this election (when it was another node). */
  readonly deposed: string | undefined;
  readonly electionTimeoutMs: number;
  /** The replica as the old session left it. */
  readonly old: ControlState;
  /** True without an intent store: the replica is whole as carried over. */
  readonly intentRestored: boolean;
}

/**
 * The SessionStarted event of a new session mastered by this node: the live peers as members (not the
 * deposed master when it has been silent for the election timeout: with the liveness window longer
 * than the election timeout it would still count as live, and would only leave by NodeLeft a second
 * later, taking its carried instances with it), the instances whose every rank lives on a member
 * (their nodes re-identified) with their runners, and the models and deployments whole (the master's
 * tick re-places those whose instance did not survive).
 */
export function sessionStarted(
  i: SessionStartInput,
): Extract<ControlEvent, { type: "SessionStarted" }> {
  const { sessionId, now, self } = i;
  const live = i.live.filter(
    (p) =>
      p.heartbeat.peer_key !== self.peer_key &&
      !(p.heartbeat.peer_key === i.deposed && now - heardAt(p) >= i.electionTimeoutMs),
  );
  const members: Member[] = [
    memberFor(sessionId, self, now),
    ...live.map((p) => memberFor(sessionId, p.heartbeat, now)),
  ];
  const inSession = new Set(members.map((m) => m.peer_key));
  const instances = Object.values(i.old.instances)
    .filter((inst) => inst.assignments.every((a) => inSession.has(a.peer_key)))
    .map((inst) => ({
      ...inst,
      assignments: inst.assignments.map((a) => ({
        ...a,
        node_id: nodeIdFor(sessionId, a.peer_key),
      })),
    }));
  const byId = new Map(instances.map((inst) => [inst.instance_id, inst]));
  const runners = Object.values(i.old.runners).flatMap((r) => {
    const a = byId.get(r.instance_id)?.assignments.find((x) => x.rank === r.rank);
    return a ? [{ ...r, node_id: a.node_id }] : [];
  });
  return {
    type: "SessionStarted",
    session: {
      session_id: sessionId,
      master_node_id: nodeIdFor(sessionId, self.peer_key),
      master_peer_key: self.peer_key,
      master_started_at: self.started_at,
      started_at: now,
    },
    members,
    models: Object.values(i.old.models),
    instances,
    runners,
    deployments: Object.values(i.old.deployments),
    intent_restored: i.intentRestored,
  };
}

/**
 * Whom a planned hand-off goes to: the most senior member of the session that is live (heard within
 * `livenessTimeoutMs`, not marked gone), caught up in this session as the same process, and not
 * draining; undefined when none is.
 */
export function successor(i: {
  readonly state: ControlState;
  readonly sessionId: SessionId;
  readonly selfKey: string;
  readonly peer: (peerKey: string) => PeerView | undefined;
  readonly now: number;
  readonly livenessTimeoutMs: number;
}): { peer: Peer; nodeId: NodeId } | undefined {
  const candidates = Object.values(i.state.members).flatMap((m) => {
    const p = i.peer(m.peer_key);
    const hb = p?.heartbeat;
    if (!p || !hb || m.peer_key === i.selfKey || p.lostAt !== undefined) return [];
    if (i.now - p.lastHeard > i.livenessTimeoutMs || hb.draining) return [];
    if (hb.session_id !== i.sessionId || hb.started_at !== m.started_at) return [];
    return [{ peer: { peer_key: m.peer_key, started_at: m.started_at }, nodeId: m.node_id }];
  });
  return candidates.sort((a, b) => compareSeniority(a.peer, b.peer))[0];
}
