// Chat requests this gateway has in flight, per instance, and the prefill still ahead of them (the
// prompt characters the engine has yet to compute before their first token). Tasks are not
// replicated, so this is what the gateway balances on, and its counts are what its node's heartbeat
// tells the other gateways (`outstanding`).
import type { Heartbeat } from "@ic/protocol";

/** One request in flight on an instance. Both calls are idempotent. */
export interface LoadTicket {
  /** The engine has started answering: its prompt is computed (the first byte of the answer). */
  prefilled(): void;
  /** The request has ended there (it is prefilled too). */
  end(): void;
}

export class RequestLoad {
  private readonly byInstance = new Map<string, number>();
  private readonly prefill = new Map<string, number>();
  private withTask = 0;

  /**
   * A request was sent to `instanceId`, with `prefillChars` of its prompt for the engine to compute
   * before it answers (what the prompt-cache map does not expect it to hold; 0 when not known).
   */
  begin(instanceId: string, prefillChars = 0): LoadTicket {
    add(this.byInstance, instanceId, 1);
    let pending = Math.max(0, prefillChars);
    if (pending > 0) add(this.prefill, instanceId, pending);
    let ended = false;
    const prefilled = () => {
      if (pending === 0) return;
      add(this.prefill, instanceId, -pending);
      pending = 0;
    };
    return {
      prefilled,
      end: () => {
        if (ended) return;
        ended = true;
        prefilled();
        add(this.byInstance, instanceId, -1);
      },
    };
  }

  /** Prompt characters this gateway's requests on `instanceId` wait to have computed. */
  prefillAhead(instanceId: string): number {
    return this.prefill.get(instanceId) ?? 0;
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

/** Adds `n` to `key`'s count, and forgets the key at zero. */
function add(m: Map<string, number>, key: string, n: number): void {
  const v = (m.get(key) ?? 0) + n;
  if (v > 0) m.set(key, v);
  else m.delete(key);
}
