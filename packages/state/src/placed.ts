// What the master's own placements share (the reconcile's re-placement, an on-demand load, a replica
// added for load): the instance a placement makes, and whether a model of a kind is served or on its
// way already. Pure.
import { kindOf } from "@ic/protocol";
import type {
  ControlState,
  Instance,
  InstanceId,
  InstanceKind,
  ModelId,
  Sharding,
} from "@ic/protocol";
import { assignmentsOf } from "@ic/placement";
import type { ClusterPlacement } from "@ic/placement";

/** The instance a placement makes: its ranks on the placement's shares, at `now`. */
export function placedInstance(
  state: ControlState,
  o: {
    readonly instance_id: InstanceId;
    readonly model_id: ModelId;
    readonly sharding: Sharding;
    readonly kind: InstanceKind;
    readonly placement: ClusterPlacement;
    readonly now: number;
  },
): Instance {
  return {
    instance_id: o.instance_id,
    model_id: o.model_id,
    sharding: o.sharding,
    ...(o.kind !== "generate" ? { kind: o.kind } : {}),
    context_size: o.placement.context_size,
    created_at: o.now,
    assignments: assignmentsOf(state, o.placement.shares),
  };
}

/**
 * Whether the model has an instance of this kind, or a deployment of it that is not given up (its
 * instance is on its way): a load of it would make a second one.
 */
export function servedOrLoading(state: ControlState, modelId: string, kind: InstanceKind): boolean {
  return (
    Object.values(state.deployments).some(
      (d) => d.model_id === modelId && kindOf(d) === kind && d.status !== "Failed",
    ) || Object.values(state.instances).some((i) => i.model_id === modelId && kindOf(i) === kind)
  );
}
