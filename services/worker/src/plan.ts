// What this node's runners should do next, decided from the control state alone: the worker's
// reconcile pass asks `planRunners` and performs the actions it returns (start, stop, restart), in
// order. Pure, so each case has a table test (plan.test.ts); the Worker is its effectful shell.
import { runnerKey } from "@ic/protocol";
import type { ControlState, Instance, RunnerState } from "@ic/protocol";

/** What the plan needs to know of a runner this node already has. */
export interface SlotView {
  readonly instance: Instance;
  readonly rank: number;
  /** Its engine process is supervised (started, and not stopped since). */
  readonly supervised: boolean;
  readonly state: RunnerState;
  /** Rank 0 of a multi-node instance: the remote ranks' endpoints it was started with. */
  readonly rpc: string | undefined;
}

export type RunnerAction =
  /** The instance is no longer assigned here: stop the runner and forget it. */
  | { readonly kind: "teardown"; readonly key: string }
  /** A new assignment: create the runner (staging first) and launch it. */
  | {
      readonly kind: "create";
      readonly key: string;
      readonly instance: Instance;
      readonly rank: number;
    }
  /** Rank 0 of a multi-node instance whose remote rank is down: stop it until every one is ready. */
  | { readonly kind: "await-remote"; readonly key: string }
  /** Rank 0 whose remote ranks came back on other endpoints: restart it against them. */
  | { readonly kind: "reconnect"; readonly key: string; readonly rpc: readonly string[] }
  /** Rank 0 stopped to wait for its remote ranks, which are all ready now: launch it again. */
  | { readonly kind: "relaunch"; readonly key: string };

/** The endpoints of an instance's remote ranks (1..n-1), or undefined while one is not ready. */
export function remoteEndpoints(state: ControlState, inst: Instance): string[] | undefined {
  const out: string[] = [];
  for (const a of inst.assignments.slice(1)) {
    const r = state.runners[runnerKey(inst.instance_id, a.rank)];
    if (r?.state !== "RunnerReady" || !r.endpoint) return undefined;
    out.push(r.endpoint);
  }
  return out;
}

/** The runners assigned to this node (by runner key), from the control state. */
function assignedHere(
  state: ControlState,
  peerKey: string,
): Map<string, { instance: Instance; rank: number }> {
  const out = new Map<string, { instance: Instance; rank: number }>();
  for (const inst of Object.values(state.instances))
    for (const a of inst.assignments)
      if (a.peer_key === peerKey)
        out.set(runnerKey(inst.instance_id, a.rank), { instance: inst, rank: a.rank });
  return out;
}

/**
 * The actions that bring this node's runners to the state's assignments: teardowns first, then per
 * assignment a new runner, or for rank 0 of a multi-node instance the reaction to its remote ranks.
 */
export function planRunners(
  state: ControlState,
  peerKey: string,
  slots: ReadonlyMap<string, SlotView>,
): RunnerAction[] {
  const desired = assignedHere(state, peerKey);
  const actions: RunnerAction[] = [];
  for (const key of slots.keys()) if (!desired.has(key)) actions.push({ kind: "teardown", key });
  for (const [key, d] of desired) {
    const slot = slots.get(key);
    if (!slot) {
      actions.push({ kind: "create", key, instance: d.instance, rank: d.rank });
    } else if (slot.rank === 0 && slot.instance.assignments.length > 1 && slot.supervised) {
      // A restarted remote rank gets a new endpoint: rank 0 must reconnect to it; a remote rank
      // that is down would make llama-server abort or hang on the lost peer.
      const rpc = remoteEndpoints(state, slot.instance);
      if (!rpc) actions.push({ kind: "await-remote", key });
      else if (rpc.join(",") !== slot.rpc) actions.push({ kind: "reconnect", key, rpc });
    } else if (
      slot.rank === 0 &&
      !slot.supervised &&
      slot.state === "RunnerWarmingUp" &&
      slot.rpc === undefined
    ) {
      actions.push({ kind: "relaunch", key });
    }
  }
  return actions;
}
