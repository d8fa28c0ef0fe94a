// Chat requests this gateway has in flight, per instance. Tasks are not replicated, so this is what
// the gateway balances on, and what its node's heartbeat tells the other gateways (`outstanding`).
import type { Heartbeat } from "@ic/protocol";

export class RequestLoad {
  private readonly byInstance = new Map<string, number>();
  private withTask = 0;

  /** A request was sent to `instanceId`; the returned function ends it (idempotent). */
  begin(instanceId: string): () => void {
    this.byInstance.set(instanceId, (this.byInstance.get(instanceId) ?? 0) + 1);
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      const n = (this.byInstance.get(instanceId) ?? 1) - 1;
      if (n > 0) this.byInstance.set(instanceId, n);
      else this.byInstance.delete(instanceId);
    };
  }

  /** The master created the request's task; the returned function closes it (idempotent). */
  taskOpened(): () => void {
    this.withTask++;
    let closed = false;
    return () => {
      if (closed) return;
      closed = true;
      this.withTask--;
    };
  }

  /** Requests whose task the master created, still open. */
  get tasksOpen(): number {
    return this.withTask;
  }

  /** In flight per instance, for this node's heartbeat; undefined when none. */
  heartbeatPart(): Record<string, number> | undefined {
    return this.byInstance.size === 0 ? undefined : Object.fromEntries(this.byInstance);
  }

  /** This gateway's live counts. */
  local(): ReadonlyMap<string, number> {
    return this.byInstance;
  }
}

/**
 * Requests in flight per instance over the whole cluster: this gateway's live counts plus what every
 * other node's last heartbeat said (at most one heartbeat period old).
 */
export function outstandingByInstance(
  local: ReadonlyMap<string, number>,
  peers: readonly Pick<Heartbeat, "peer_key" | "outstanding">[],
  selfPeerKey: string,
): Map<string, number> {
  const out = new Map(local);
  for (const p of peers) {
    if (p.peer_key === selfPeerKey || !p.outstanding) continue;
    for (const [id, n] of Object.entries(p.outstanding)) out.set(id, (out.get(id) ?? 0) + n);
  }
  return out;
}
