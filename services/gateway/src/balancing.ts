// Picks which ready instance of a model serves a request: fewest outstanding tasks, then the lowest
// link latency from this node (a local rank 0 counts as 0), then the oldest. Pure, so tables test it.
import type { Task } from "@ic/protocol";
import type { ReadyInstance } from "./readiness.ts";

/** A request this gateway sent whose task may not be in the replica yet. */
export interface PendingRequest {
  readonly command_id: string;
  readonly instance_id: string;
}

/**
 * Outstanding requests per instance: the replicated tasks plus this gateway's requests whose
 * TaskCreated has not arrived yet (counted once: a pending request whose task exists is skipped),
 * less the tasks that ended here and whose FinishTask is not sent yet (`ended`).
 */
export function outstandingByInstance(
  tasks: readonly Task[],
  pending: readonly PendingRequest[],
  ended?: { has(taskId: string): boolean },
): Map<string, number> {
  const out = new Map<string, number>();
  const add = (id: string) => out.set(id, (out.get(id) ?? 0) + 1);
  const known = new Set<string>();
  for (const t of tasks) {
    known.add(t.command_id);
    if (!ended?.has(t.task_id)) add(t.instance_id);
  }
  for (const p of pending) if (!known.has(p.command_id)) add(p.instance_id);
  return out;
}

export interface BalanceInput {
  readonly outstanding: ReadonlyMap<string, number>;
  /** This node's peer key: an instance whose rank 0 runs here has latency 0. */
  readonly selfPeerKey: string;
  /** Measured round trip from this node to a peer (heartbeat links); undefined when unknown. */
  readonly rttMs: (peerKey: string) => number | undefined;
}

/** The instance to send the next request to; undefined only for an empty list. */
export function chooseInstance(
  ready: readonly ReadyInstance[],
  o: BalanceInput,
): ReadyInstance | undefined {
  const latency = (r: ReadyInstance) => {
    const peer = r.instance.assignments[0]!.peer_key;
    return peer === o.selfPeerKey ? 0 : (o.rttMs(peer) ?? Number.POSITIVE_INFINITY);
  };
  const scored = ready.map((r) => ({
    r,
    load: o.outstanding.get(r.instance.instance_id) ?? 0,
    rtt: latency(r),
  }));
  scored.sort(
    (a, b) =>
      a.load - b.load ||
      (a.rtt === b.rtt ? 0 : a.rtt < b.rtt ? -1 : 1) ||
      a.r.instance.created_at - b.r.instance.created_at ||
      a.r.instance.instance_id.localeCompare(b.r.instance.instance_id),
  );
  return scored[0]?.r;
}
