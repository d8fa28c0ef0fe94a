// The replicated state machine: apply(state, event) -> state, pure and total over ordered events.
// Every node folds the master's indexed events through this one function, so replicas agree.
import { own } from "./own.ts";
import { emptyState, runnerKey } from "@ic/protocol";
import type { ControlState, IndexedEvent } from "@ic/protocol";

/** Failures a deployment remembers (the newest). */
const MAX_FAILURES = 8;

export class OutOfOrderEvent extends Error {
  constructor(
    readonly expected: number,
    readonly got: number,
  ) {
    super(`event ${got} applied out of order (expected ${expected})`);
  }
}

function without<T>(rec: Record<string, T>, drop: (v: T, k: string) => boolean): Record<string, T> {
  const out: Record<string, T> = {};
  for (const [k, v] of Object.entries(rec)) if (!drop(v, k)) out[k] = v;
  return out;
}

function dropInstances(state: ControlState, gone: Set<string>): ControlState {
  if (gone.size === 0) return state;
  return {
    ...state,
    instances: without(state.instances, (i) => gone.has(i.instance_id)),
    runners: without(state.runners, (r) => gone.has(r.instance_id)),
  };
}

/**
 * Applies one event. A SessionStarted event resets the state to the carried-over snapshot;
 * any other event must belong to the current session and carry index = state.index + 1.
 */
export function apply(state: ControlState, ev: IndexedEvent): ControlState {
  const e = ev.event;
  if (e.type === "SessionStarted") {
    const s = emptyState();
    s.session = e.session;
    s.index = ev.index;
    for (const m of e.members) s.members[m.node_id] = m;
    for (const m of e.models) s.models[m.model_id] = m;
    for (const i of e.instances) s.instances[i.instance_id] = i;
    for (const r of e.runners) {
      if (own(s.instances, r.instance_id)) s.runners[runnerKey(r.instance_id, r.rank)] = r;
    }
    for (const d of e.deployments) s.deployments[d.deployment_id] = d;
    s.intent_restored = e.intent_restored;
    return s;
  }
  if (state.session?.session_id !== ev.session_id || ev.index !== state.index + 1) {
    throw new OutOfOrderEvent(state.index + 1, ev.index);
  }
  const next: ControlState = { ...state, index: ev.index };
  switch (e.type) {
    case "NodeJoined":
      return { ...next, members: { ...next.members, [e.member.node_id]: e.member } };
    case "NodeLeft": {
      const lost = new Set(
        Object.values(next.instances)
          .filter((i) => i.assignments.some((a) => a.node_id === e.node_id))
          .map((i) => i.instance_id),
      );
      const s = dropInstances(next, lost);
      return { ...s, members: without(s.members, (_m, k) => k === e.node_id) };
    }
    case "ModelRegistered": {
      // A model registered anew (pulled again, fixed on disk) gives its failed deployments
      // another try: they go Pending with their failures forgotten.
      const deployments = { ...next.deployments };
      for (const d of Object.values(next.deployments))
        if (d.model_id === e.model.model_id && d.status === "Failed") {
          const { failures: _f, ...rest } = d;
          deployments[d.deployment_id] = {
            ...rest,
            status: "Pending",
            refusal: {
              code: "model_updated",
              message: "the model was registered anew; placing it again",
            },
          };
        }
      return { ...next, models: { ...next.models, [e.model.model_id]: e.model }, deployments };
    }
    case "ModelDeregistered":
      return { ...next, models: without(next.models, (_m, k) => k === e.model_id) };
    case "InstancePlaced": {
      const placed = {
        ...next,
        instances: { ...next.instances, [e.instance.instance_id]: e.instance },
      };
      const d = e.deployment_id !== undefined ? next.deployments[e.deployment_id] : undefined;
      if (!d) return placed;
      const { refusal: _gone, ...rest } = d;
      const updated = { ...rest, instance_id: e.instance.instance_id, status: "Placed" as const };
      return { ...placed, deployments: { ...next.deployments, [d.deployment_id]: updated } };
    }
    case "DeploymentCreated":
      return {
        ...next,
        deployments: { ...next.deployments, [e.deployment.deployment_id]: e.deployment },
      };
    case "DeploymentPending": {
      const d = next.deployments[e.deployment_id];
      if (!d) return next;
      const updated = { ...d, status: "Pending" as const, refusal: e.refusal };
      return { ...next, deployments: { ...next.deployments, [d.deployment_id]: updated } };
    }
    case "DeploymentFailing": {
      const d = next.deployments[e.deployment_id];
      if (!d) return next;
      const failures = [...(d.failures ?? []), e.failure].slice(-MAX_FAILURES);
      const { refusal: _r, ...rest } = d;
      const updated = { ...rest, status: "Failing" as const, failures };
      return { ...next, deployments: { ...next.deployments, [d.deployment_id]: updated } };
    }
    case "DeploymentFailed": {
      const d = next.deployments[e.deployment_id];
      if (!d) return next;
      const updated = {
        ...d,
        status: "Failed" as const,
        refusal: { code: "load_failed", message: e.reason },
      };
      return { ...next, deployments: { ...next.deployments, [d.deployment_id]: updated } };
    }
    case "DeploymentRetiring":
    case "DeploymentRecalled": {
      const d = next.deployments[e.deployment_id];
      if (!d) return next;
      const { retiring_since: _was, ...rest } = d;
      const updated = e.type === "DeploymentRetiring" ? { ...rest, retiring_since: e.since } : rest;
      return { ...next, deployments: { ...next.deployments, [d.deployment_id]: updated } };
    }
    case "DeploymentDeleted":
      return { ...next, deployments: without(next.deployments, (_d, k) => k === e.deployment_id) };
    case "InstanceDeleted":
      return dropInstances(next, new Set([e.instance_id]));
    case "RunnerStatus":
    case "RunnerFailed": {
      if (!next.instances[e.runner.instance_id]) return next;
      const key = runnerKey(e.runner.instance_id, e.runner.rank);
      return { ...next, runners: { ...next.runners, [key]: e.runner } };
    }
    case "IntentRestored":
      return { ...next, intent_restored: true };
    case "MasterHandedOff":
      if (!next.session) return next;
      return {
        ...next,
        session: {
          ...next.session,
          master_node_id: e.master_node_id,
          master_peer_key: e.master_peer_key,
          master_started_at: e.master_started_at,
        },
      };
    // Notifications: the gateway holding the task, and the operator's log, read them.
    case "TaskFailed":
    case "DownloadFailed":
      return next;
  }
}
