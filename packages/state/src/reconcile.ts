// Intent kept as state: for every deployment whose instance is gone, place it again on what is there,
// or say why not. Pure (ids and timing come from the caller), so the master's tick is a thin shell.
// It calls @ic/placement (placeInCluster, as the API places); placement never imports this package.
import type {
  ControlState,
  Deployment,
  DeploymentRefusal,
  Instance,
  InstanceId,
  ModelId,
} from "@ic/protocol";
import { assignmentsOf, placeInCluster } from "@ic/placement";
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
    };

export interface ReconcileOptions {
  readonly now: number;
  readonly newInstanceId: () => InstanceId;
  readonly memory?: Partial<MemoryModel>;
  /** Whether this deployment may be attempted now (the caller's backoff); default: always. */
  readonly due?: (d: Deployment) => boolean;
}

/** Deployments whose instance is no longer in the state (its node left, or it was never re-placed). */
export function lostDeployments(state: ControlState): Deployment[] {
  return Object.values(state.deployments)
    .filter((d) => !state.instances[d.instance_id])
    .sort((a, b) => a.created_at - b.created_at || a.deployment_id.localeCompare(b.deployment_id));
}

function sameRefusal(a: DeploymentRefusal | undefined, b: DeploymentRefusal): boolean {
  return a !== undefined && a.code === b.code && a.message === b.message;
}

/**
 * One action per lost deployment that is due: `place` (a new instance, decided as POST /place_instance
 * decides it, against the instances already placed, earlier actions of this call included) or
 * `pending` with the typed refusal, only when the refusal differs from the one already recorded.
 */
export function reconcile(
  state: ControlState,
  reports: readonly NodeReport[],
  o: ReconcileOptions,
): ReconcileAction[] {
  const out: ReconcileAction[] = [];
  let view = state;
  for (const d of lostDeployments(state)) {
    if (o.due && !o.due(d)) continue;
    const reason =
      d.status === "Pending"
        ? `deployment ${d.deployment_id} is pending; retrying`
        : `instance ${d.instance_id} of deployment ${d.deployment_id} was lost`;
    const model = state.models[d.model_id];
    let refusal: DeploymentRefusal;
    if (!model) {
      refusal = { code: "model_not_found", message: `model ${d.model_id} is not registered` };
    } else {
      const byPeer = new Map(Object.values(view.members).map((m) => [m.peer_key, m.node_id]));
      const excluded = d.excluded_peer_keys.flatMap((k) => byPeer.get(k) ?? []);
      const r = placeInCluster(view, reports, {
        model,
        minNodes: d.min_nodes,
        sharding: d.sharding,
        excluded,
        ...(o.memory ? { memory: o.memory } : {}),
      });
      if (r.ok) {
        const instance: Instance = {
          instance_id: o.newInstanceId(),
          model_id: d.model_id as ModelId,
          sharding: d.sharding,
          created_at: o.now,
          assignments: assignmentsOf(view, r.shares),
        };
        out.push({ kind: "place", deployment_id: d.deployment_id, instance, reason });
        view = { ...view, instances: { ...view.instances, [instance.instance_id]: instance } };
        continue;
      }
      refusal = {
        code: r.code,
        message: r.message,
        ...(r.node_id !== undefined ? { node_id: r.node_id } : {}),
        ...(r.health_code !== undefined ? { health_code: r.health_code } : {}),
      };
    }
    if (d.status === "Pending" && sameRefusal(d.refusal, refusal)) continue;
    out.push({ kind: "pending", deployment_id: d.deployment_id, refusal, reason });
  }
  return out;
}
