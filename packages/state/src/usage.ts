// How each instance is used, as the master sees it (its task table: requests begin and end there), and
// the idle-unload rule that reads it: an instance whose deployment has a keep_alive is unloaded once it
// has had no request for that long (docs/capacity.md). Never replicated: a new master starts counting
// from when it first sees each instance, which only delays an unload.
import { runnerKey } from "@ic/protocol";
import type { ControlState, InstanceId } from "@ic/protocol";
import type { InstanceUse } from "@ic/placement";

/**
 * An instance loaded on demand that has served nothing yet (its first request is still on its way
 * from the gateway that asked for it, or this master took over meanwhile) is kept at least this
 * long after it is first seen ready, whatever its keep_alive.
 */
export const UNUSED_GRACE_MS = 30_000;

interface Entry {
  /** When a request last began or ended on it, or when it was first seen. */
  lastUsedAt: number;
  /** Requests begun on it since this master first saw it. */
  served: number;
  /** When it was first seen with its rank 0 ready (undefined: not yet). */
  readyAt: number | undefined;
}

/** Per instance: last use and requests served, kept by the master beside its task table. */
export class InstanceUsage {
  private readonly entries = new Map<string, Entry>();

  private entry(id: string, now: number): Entry {
    let e = this.entries.get(id);
    if (!e) {
      e = { lastUsedAt: now, served: 0, readyAt: undefined };
      this.entries.set(id, e);
    }
    return e;
  }

  /** A request began on it. */
  began(id: string, now: number): void {
    const e = this.entry(id, now);
    e.lastUsedAt = now;
    e.served++;
  }

  /** A request on it ended (finished or failed). */
  ended(id: string, now: number): void {
    const e = this.entry(id, now);
    e.lastUsedAt = Math.max(e.lastUsedAt, now);
  }

  /** Every tick: instances seen for the first time start counting; those gone are forgotten. */
  observe(state: ControlState, now: number): void {
    for (const id of this.entries.keys()) if (!state.instances[id]) this.entries.delete(id);
    for (const inst of Object.values(state.instances)) {
      const e = this.entry(inst.instance_id, now);
      if (e.readyAt === undefined && isReady(state, inst.instance_id)) e.readyAt = now;
    }
  }

  lastUsedAt(id: string): number | undefined {
    return this.entries.get(id)?.lastUsedAt;
  }

  /** What idleUnloads reads of one instance. */
  get(id: string): { lastUsedAt: number; served: number; readyAt: number | undefined } | undefined {
    return this.entries.get(id);
  }

  clear(): void {
    this.entries.clear();
  }
}

function isReady(state: ControlState, id: string): boolean {
  return state.runners[runnerKey(id, 0)]?.state === "RunnerReady";
}

export interface IdleUnload {
  readonly instance_id: InstanceId;
  readonly reason: string;
}

/**
 * The instances to unload now: those of a Placed deployment with a keep_alive (≥ 0), ready, with no
 * request in flight, and idle for their keep_alive since their last request (or, having served
 * none, for at least UNUSED_GRACE_MS since first seen ready). Oldest use first.
 */
export function idleUnloads(
  state: ControlState,
  now: number,
  usage: Pick<InstanceUsage, "get">,
  open: (instanceId: string) => number,
): IdleUnload[] {
  const out: { u: IdleUnload; at: number }[] = [];
  for (const d of Object.values(state.deployments)) {
    const keep = d.keep_alive_ms;
    if (keep === undefined || keep < 0 || d.status !== "Placed") continue;
    const inst = state.instances[d.instance_id];
    const u = inst && usage.get(inst.instance_id);
    if (!inst || !u || u.readyAt === undefined || open(inst.instance_id) > 0) continue;
    const since = u.served > 0 ? u.lastUsedAt : Math.max(u.lastUsedAt, u.readyAt);
    const wait = u.served > 0 ? keep : Math.max(keep, UNUSED_GRACE_MS);
    if (now - since < wait) continue;
    out.push({
      at: since,
      u: {
        instance_id: inst.instance_id,
        reason:
          u.served > 0
            ? `idle for ${seconds(now - since)} (keep_alive ${seconds(keep)}): unloaded`
            : `served no request within ${seconds(wait)} of being ready: unloaded`,
      },
    });
  }
  return out.sort((a, b) => a.at - b.at).map((x) => x.u);
}

function seconds(ms: number): string {
  return `${Math.round(ms / 100) / 10} s`;
}

/** InstanceUse (what planLoad reads) from the usage and the open tasks. */
export function instanceUse(
  usage: Pick<InstanceUsage, "lastUsedAt">,
  open: (instanceId: string) => number,
): (id: string) => InstanceUse {
  return (id) => {
    const last = usage.lastUsedAt(id);
    return { open: open(id), ...(last !== undefined ? { lastUsedAt: last } : {}) };
  };
}
