// What the intent store must record for the events the master sequences, and the events that bring a
// replica back to the stored intent (after a full restart). Pure: the master is their I/O shell.
import { deploymentIntent } from "@ic/protocol";
import type {
  ControlEvent,
  ControlState,
  Deployment,
  InstanceId,
  Intent,
  IntentWrite,
} from "@ic/protocol";

/** The store writes that make the intent durable before the events are sequenced (in order). */
export function intentWrites(events: readonly ControlEvent[]): IntentWrite[] {
  const out: IntentWrite[] = [];
  for (const e of events) {
    switch (e.type) {
      case "DeploymentCreated":
        out.push({ op: "put_deployment", deployment: deploymentIntent(e.deployment) });
        break;
      case "DeploymentDeleted":
        out.push({ op: "delete_deployment", deployment_id: e.deployment_id });
        break;
      case "ModelRegistered":
        out.push({ op: "put_model", model: e.model });
        break;
      case "ModelDeregistered":
        out.push({ op: "delete_model", model_id: e.model_id });
        break;
      default:
        break;
    }
  }
  return out;
}

/** Why a restored deployment has no instance yet (shown in /state until the master places it). */
export const RESTORED = {
  code: "restored",
  message: "restored from the intent store after a restart; placing it again",
} as const;

export interface Restore {
  /** Events that make the replica hold exactly the stored intent. */
  readonly events: ControlEvent[];
  /** Writes that copy into the store what only the replica holds (an older cluster's state). */
  readonly writes: IntentWrite[];
}

/**
 * Brings the replica to the stored intent. The store is authoritative once initialized: a stored
 * deployment the replica lacks comes back Pending (the master's reconcile places it), one the
 * replica holds that the store does not is deleted (another side removed it). A stored model the
 * replica lacks is registered; a model only the replica knows is written to the store (models
 * come from the store host's disk, which registers them again anyway). Before the store is
 * initialized, the replica's intent is copied into it and nothing is deleted.
 */
export function restoreIntent(
  state: ControlState,
  stored: Intent,
  instanceIdFor: (deploymentId: string) => InstanceId,
): Restore {
  const events: ControlEvent[] = [];
  const writes: IntentWrite[] = [];
  const storedDeps = new Map(stored.deployments.map((d) => [d.deployment_id, d]));
  for (const d of stored.deployments) {
    if (Object.hasOwn(state.deployments, d.deployment_id)) continue;
    const deployment: Deployment = {
      ...d,
      instance_id: instanceIdFor(d.deployment_id),
      status: "Pending",
      refusal: { ...RESTORED },
    };
    events.push({ type: "DeploymentCreated", deployment });
  }
  for (const d of Object.values(state.deployments)) {
    if (storedDeps.has(d.deployment_id)) continue;
    if (!stored.initialized) {
      writes.push({ op: "put_deployment", deployment: deploymentIntent(d) });
      continue;
    }
    const reason = "not in the intent store (deleted while this node was away)";
    events.push({ type: "DeploymentDeleted", deployment_id: d.deployment_id, reason });
    if (Object.hasOwn(state.instances, d.instance_id))
      events.push({ type: "InstanceDeleted", instance_id: d.instance_id, reason });
  }
  const storedModels = new Set(stored.models.map((m) => m.model_id));
  for (const m of stored.models)
    if (!Object.hasOwn(state.models, m.model_id))
      events.push({ type: "ModelRegistered", model: m });
  for (const m of Object.values(state.models))
    if (!storedModels.has(m.model_id)) writes.push({ op: "put_model", model: m });
  return { events, writes };
}

/**
 * What makes the store hold `wanted` after `done` was written: every wanted write not already done
 * as is, and a delete for each deployment put that is no longer wanted. With `wanted` empty (the
 * command was refused after all, or its write failed) it undoes `done`'s deployment puts.
 */
export function amendWrites(
  done: readonly IntentWrite[],
  wanted: readonly IntentWrite[],
): IntentWrite[] {
  const key = (w: IntentWrite) => JSON.stringify(w);
  const doneKeys = new Set(done.map(key));
  const wantedDeployments = new Set(
    wanted.flatMap((w) => (w.op === "put_deployment" ? [w.deployment.deployment_id] : [])),
  );
  return [
    ...wanted.filter((w) => !doneKeys.has(key(w))),
    ...done.flatMap((w): IntentWrite[] =>
      w.op === "put_deployment" && !wantedDeployments.has(w.deployment.deployment_id)
        ? [{ op: "delete_deployment", deployment_id: w.deployment.deployment_id }]
        : [],
    ),
  ];
}
