// Intent kept as state: for every deployment whose instance is gone, place it again on what is there,
// or say why not (not a replica that retires: it is about to be removed). Pure (ids and timing come
// from the caller), so the master's tick is a thin shell.
// It calls @ic/placement (placeInCluster, as the API places); placement never imports this package.
import { kindOf, runnerKey } from "@ic/protocol";
import type {
  ControlState,
  Deployment,
  DeploymentFailure,
  DeploymentRefusal,
  Instance,
  InstanceId,
  ModelId,
} from "@ic/protocol";
import { placeInCluster } from "@ic/placement";
import { placedInstance } from "./placed.ts";
import type { MemoryModel, NodeReport } from "@ic/placement";

export type ReconcileAction =
  | {
      readonly kind: "place";
      readonly deployment_id: string;
      readonly instance: Instance;
      readonly reason: string;
    }
  | {
      readonly kind: "pending";
      readonly deployment_id: string;
      readonly refusal: DeploymentRefusal;
      readonly reason: string;
    }
  /** It failed to run on every node it could go to: give it up (DeploymentFailed). */
  | { readonly kind: "fail"; readonly deployment_id: string; readonly reason: string };

/** Nodes a failing deployment is tried on at most before it is given up. */
export const MAX_FAILURE_ATTEMPTS = 3;

export interface ReconcileOptions {
  readonly now: number;
  readonly newInstanceId: () => InstanceId;
  readonly memory?: Partial<MemoryModel>;
  /** Whether this deployment may be attempted now (the caller's backoff); default: always. */
  readonly due?: (d: Deployment) => boolean;
}

/**
 * Deployments whose instance is no longer in the state (its node left, it failed to run, or it was
 * never re-placed); a Failed one is left alone until it is retried.
 */
export function lostDeployments(state: ControlState): Deployment[] {
  return Object.values(state.deployments)
    .filter((d) => d.status !== "Failed" && !state.instances[d.instance_id])
    .sort(byAge);
}

function byAge(a: Deployment, b: Deployment): number {
  return a.created_at - b.created_at || a.deployment_id.localeCompare(b.deployment_id);
}

/**
 * Placed deployments whose instance has a rank on a draining node (its report says `draining`):
 * they are placed elsewhere first, while the draining node still serves what it holds.
 */
export function evacuatingDeployments(
  state: ControlState,
  reports: readonly Pick<NodeReport, "peer_key" | "draining">[],
): Deployment[] {
  const draining = new Set(reports.filter((r) => r.draining).map((r) => r.peer_key));
  if (draining.size === 0) return [];
  return Object.values(state.deployments)
    .filter(
      (d) =>
        d.status === "Placed" &&
        state.instances[d.instance_id]?.assignments.some((a) => draining.has(a.peer_key)),
    )
    .sort(byAge);
}

/** "it failed to run on node-1 (<engine line>) and node-2 (<engine line>)". */
function failedEverywhere(d: Deployment): string {
  const where = (d.failures ?? []).map((f) => `${f.node_name} (${f.error})`);
  return `${d.model_id} failed to run on every node it was tried on: ${where.join("; ")}; fix the model (pull or copy it again: a model registered anew is retried) or place it anew`;
}

/**
 * Placed deployments whose instance has a rank that gave up (RunnerFailed): the failure to record
 * (node, instance, the engine's last error line) before the instance is removed and placed elsewhere.
 */
export function failingInstances(
  state: ControlState,
  now: number,
): { deployment_id: string; instance_id: InstanceId; failure: DeploymentFailure }[] {
  const out: { deployment_id: string; instance_id: InstanceId; failure: DeploymentFailure }[] = [];
  for (const d of Object.values(state.deployments)) {
    const inst = state.instances[d.instance_id];
    if (!inst || d.status === "Failed") continue;
    for (const a of inst.assignments) {
      const r = state.runners[runnerKey(inst.instance_id, a.rank)];
      if (r?.state !== "RunnerFailed") continue;
      out.push({
        deployment_id: d.deployment_id,
        instance_id: inst.instance_id,
        failure: {
          peer_key: a.peer_key,
          node_name: state.members[a.node_id]?.name ?? a.node_id,
          instance_id: inst.instance_id,
          error: (r.last_error ?? r.reason ?? "the runner failed").slice(0, 400),
          at: now,
        },
      });
      break;
    }
  }
  return out;
}

/** The nodes the instances of `d`'s sibling replicas (same replica_set) hold now. */
function siblingNodes(state: ControlState, d: Deployment): string[] {
  const out = new Set<string>();
  for (const s of Object.values(state.deployments)) {
    if (s.replica_set !== d.replica_set || s.deployment_id === d.deployment_id) continue;
    for (const a of state.instances[s.instance_id]?.assignments ?? []) out.add(a.node_id);
  }
  return [...out];
}

function sameRefusal(a: DeploymentRefusal | undefined, b: DeploymentRefusal): boolean {
  return a !== undefined && a.code === b.code && a.message === b.message;
}

/** Why a deployment is placed again, in the words its event carries. */
function reasonFor(d: Deployment, moving: boolean): string {
  if (moving)
    return `instance ${d.instance_id} of deployment ${d.deployment_id} is on a draining node; placed elsewhere before it leaves`;
  if (d.status === "Pending") return `deployment ${d.deployment_id} is pending; retrying`;
  if (d.status === "Failing")
    return `instance ${d.instance_id} of deployment ${d.deployment_id} failed to run; trying another node`;
  return `instance ${d.instance_id} of deployment ${d.deployment_id} was lost`;
}

/**
 * The nodes a deployment's new instance stays off: those its placement excluded; while it is Failing,
 * those it failed on; for a replica, those its siblings' instances hold (earlier actions included).
 */
function excludedFor(view: ControlState, d: Deployment): string[] {
  const byPeer = new Map(Object.values(view.members).map((m) => [m.peer_key, m.node_id]));
  const tried = d.status === "Failing" ? (d.failures ?? []).map((f) => f.peer_key) : [];
  const siblings = d.replica_set ? siblingNodes(view, d) : [];
  return [...[...d.excluded_peer_keys, ...tried].flatMap((k) => byPeer.get(k) ?? []), ...siblings];
}

/**
 * One action per lost deployment that is due: `place` (a new instance, decided as POST /place_instance
 * decides it, against the instances already placed, earlier actions of this call included) or
 * `pending` with the typed refusal, only when the refusal differs from the one already recorded.
 * Then one per deployment on a draining node that another node can take now: `place` (its instance
 * on the draining node stays until that node leaves; nothing new is sent to it); when none can,
 * nothing (it is placed again once the node has left, as a lost one).
 */
export function reconcile(
  state: ControlState,
  reports: readonly NodeReport[],
  o: ReconcileOptions,
): ReconcileAction[] {
  const out: ReconcileAction[] = [];
  let view = state;
  // A retiring replica is not placed again (scaling.ts removes it once its requests end).
  const todo = [
    ...lostDeployments(state).map((d) => ({ d, moving: false })),
    ...evacuatingDeployments(state, reports).map((d) => ({ d, moving: true })),
  ].filter(({ d }) => d.retiring_since === undefined);
  for (const { d, moving } of todo) {
    if (o.due && !o.due(d)) continue;
    const reason = reasonFor(d, moving);
    const failures = d.failures ?? [];
    if (d.status === "Failing" && failures.length >= MAX_FAILURE_ATTEMPTS) {
      out.push({ kind: "fail", deployment_id: d.deployment_id, reason: failedEverywhere(d) });
      continue;
    }
    const model = state.models[d.model_id];
    if (moving && !model) continue;
    let refusal: DeploymentRefusal;
    if (!model) {
      refusal = { code: "model_not_found", message: `model ${d.model_id} is not registered` };
    } else {
      const excluded = excludedFor(view, d);
      const r = placeInCluster(view, reports, {
        model,
        minNodes: d.min_nodes,
        sharding: d.sharding,
        excluded,
        ...(o.memory ? { memory: o.memory } : {}),
      });
      if (r.ok) {
        const instance = placedInstance(view, {
          instance_id: o.newInstanceId(),
          model_id: d.model_id as ModelId,
          sharding: d.sharding,
          kind: kindOf(d),
          placement: r,
          now: o.now,
        });
        out.push({ kind: "place", deployment_id: d.deployment_id, instance, reason });
        view = {
          ...view,
          instances: { ...view.instances, [instance.instance_id]: instance },
          // Its siblings placed later in this call see where it went.
          deployments: {
            ...view.deployments,
            [d.deployment_id]: { ...d, instance_id: instance.instance_id },
          },
        };
        continue;
      }
      if (moving) continue;
      refusal = {
        code: r.code,
        message: r.message,
        ...(r.node_id !== undefined ? { node_id: r.node_id } : {}),
        ...(r.health_code !== undefined ? { health_code: r.health_code } : {}),
      };
    }
    // Failing, and no node it has not failed on can take it: it failed everywhere it could run.
    if (
      d.status === "Failing" &&
      (refusal.code === "all_excluded" || refusal.code === "no_cycle")
    ) {
      out.push({ kind: "fail", deployment_id: d.deployment_id, reason: failedEverywhere(d) });
      continue;
    }
    if (d.status === "Pending" && sameRefusal(d.refusal, refusal)) continue;
    out.push({ kind: "pending", deployment_id: d.deployment_id, refusal, reason });
  }
  return out;
}
