// Whether a model can serve a chat request now and, when it cannot, what is happening and when to retry.
// Pure over the replica and a clock, so /v1/models, /state and the chat 404s agree on what is ready.
import { runnerKey, ServiceError } from "@ic/protocol";
import type { ControlState, Instance, Runner } from "@ic/protocol";

export interface ReadyInstance {
  readonly instance: Instance;
  /** Base URL of the rank-0 llama-server. */
  readonly endpoint: string;
  /** A scale-down retires its deployment: no new request while a sibling is ready (routing.ts). */
  readonly retiring?: true;
}

/** What a not-ready instance is doing; `order` ranks how close it is to serving (higher is closer). */
export interface Phase {
  readonly phase:
    | "failed"
    | "stopped"
    | "pending"
    | "staging"
    | "waiting_for_ranks"
    | "restarting"
    | "warming_up";
  readonly order: number;
  readonly text: string;
  readonly node: string | undefined;
  /** undefined: retrying will not help by itself (the instance failed). */
  readonly retryAfterS: number | undefined;
}

export type Readiness =
  | { readonly kind: "ready"; readonly instances: readonly ReadyInstance[] }
  | {
      readonly kind: "not_ready";
      readonly message: string;
      readonly retryable: boolean;
      readonly retryAfterS: number | undefined;
      readonly details: Record<string, unknown>;
    }
  | { readonly kind: "absent" };

function byAge(a: Instance, b: Instance): number {
  return a.created_at - b.created_at || a.instance_id.localeCompare(b.instance_id);
}

function rank0(state: ControlState, i: Instance): Runner | undefined {
  return state.runners[runnerKey(i.instance_id, 0)];
}

/** The instances of a model whose rank 0 is ready with an endpoint, oldest first. */
export function readyInstances(state: ControlState, modelId: string): ReadyInstance[] {
  const out: ReadyInstance[] = [];
  let retiring: Set<string> | undefined;
  for (const d of Object.values(state.deployments))
    if (d.retiring_since !== undefined) (retiring ??= new Set()).add(d.instance_id);
  for (const instance of Object.values(state.instances)
    .filter((i) => i.model_id === modelId)
    .sort(byAge)) {
    const r = rank0(state, instance);
    if (r?.state !== "RunnerReady" || !r.endpoint) continue;
    const retires = retiring?.has(instance.instance_id) ? { retiring: true as const } : {};
    out.push({ instance, endpoint: r.endpoint, ...retires });
  }
  return out;
}

/** The models with at least one ready instance, sorted (what GET /v1/models lists). */
export function readyModels(state: ControlState): string[] {
  const models = new Set(Object.values(state.instances).map((i) => i.model_id));
  return [...models].filter((m) => readyInstances(state, m).length > 0).sort();
}

/** Whether a deployment (Placed or Pending) keeps the model: its instance comes back if lost. */
export function isDeployed(state: ControlState, modelId: string): boolean {
  return Object.values(state.deployments).some((d) => d.model_id === modelId);
}

export function formatBytes(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(1)} GB`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} MB`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} kB`;
  return `${n} B`;
}

const clamp = (n: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, Math.ceil(n)));

/** Seconds a runner needs after staging to load and warm up (a guess; warmups are usually short). */
const WARMUP_GUESS_S = 2;

/** What one instance that is not ready is doing. */
export function instancePhase(state: ControlState, i: Instance, now: number): Phase {
  const a0 = i.assignments[0]!;
  const node = state.members[a0.node_id]?.name ?? a0.node_id;
  const r = rank0(state, i);
  if (!r) {
    return {
      phase: "pending",
      order: 1,
      text: `is starting on ${node}`,
      node,
      retryAfterS: 2,
    };
  }
  switch (r.state) {
    case "RunnerFailed":
      return {
        phase: "failed",
        order: 0,
        text: `has failed on ${node}${r.reason ? ` (${r.reason})` : ""}${r.last_error ? `: ${r.last_error}` : ""}`,
        node,
        retryAfterS: undefined,
      };
    case "RunnerStopped":
      return { phase: "stopped", order: 1, text: `is stopped on ${node}`, node, retryAfterS: 5 };
    case "RunnerStaging":
      return stagingPhase(r.progress, node, now);
    case "RunnerWarmingUp":
    case "RunnerReady": {
      if (r.reason === "waiting for remote ranks") {
        const missing = i.assignments.slice(1).flatMap((a) => {
          const rr = state.runners[runnerKey(i.instance_id, a.rank)];
          if (rr?.state === "RunnerReady") return [];
          const n = state.members[a.node_id]?.name ?? a.node_id;
          return [`rank ${a.rank} on ${n}: ${rr?.state ?? "not reported"}`];
        });
        return {
          phase: "waiting_for_ranks",
          order: 3,
          text: `is waiting on ${node} for remote ranks${missing.length ? ` (${missing.join(", ")})` : ""}`,
          node,
          retryAfterS: 3,
        };
      }
      if (r.restarts > 0) {
        return {
          phase: "restarting",
          order: 3,
          text: `is restarting after a crash on ${node} (restart ${r.restarts}${r.last_error ? `; the engine said: ${r.last_error}` : ""})`,
          node,
          retryAfterS: 5,
        };
      }
      const started = r.warmup_started_at ?? r.since;
      const secs = Math.max(0, Math.round((now - started) / 1000));
      return {
        phase: "warming_up",
        order: 4,
        text: `is warming up on ${node} (${secs} s)`,
        node,
        retryAfterS: WARMUP_GUESS_S,
      };
    }
  }
}

/**
 * A model whose deployments all failed to run, or are being moved after a failure: no instance can
 * serve now, and the answer says what the engine said. Failed everywhere: not retryable.
 */
function deploymentFailure(state: ControlState, modelId: string): Readiness | undefined {
  const deps = Object.values(state.deployments).filter((d) => d.model_id === modelId);
  if (deps.length === 0) return undefined;
  const failed = deps.filter((d) => d.status === "Failed");
  if (failed.length === deps.length) {
    const d = failed[0]!;
    return {
      kind: "not_ready",
      message: d.refusal?.message ?? `${modelId} failed to run on every node it was tried on`,
      retryable: false,
      retryAfterS: undefined,
      details: { model: modelId, phase: "failed", deployment_id: d.deployment_id },
    };
  }
  const moving = deps.find((d) => d.status === "Failing");
  if (!moving || deps.some((d) => d.status !== "Failing" && d.status !== "Failed"))
    return undefined;
  const last = moving.failures?.at(-1);
  return {
    kind: "not_ready",
    message: `${modelId} failed to run on ${last?.node_name ?? "a node"}${last ? ` (${last.error})` : ""}; it is being placed on another node; retry`,
    retryable: true,
    retryAfterS: 10,
    details: { model: modelId, phase: "failing", deployment_id: moving.deployment_id },
  };
}

/** Whether the model can be served, and if not, the most advanced instance's story. */
export function readiness(state: ControlState, modelId: string, now: number): Readiness {
  const ready = readyInstances(state, modelId);
  if (ready.length > 0) return { kind: "ready", instances: ready };
  const instances = Object.values(state.instances)
    .filter((i) => i.model_id === modelId)
    .sort(byAge);
  const deployed = isDeployed(state, modelId);
  if (instances.length === 0) {
    const failing = deploymentFailure(state, modelId);
    if (failing) return failing;
    if (!deployed && !state.intent_restored)
      return {
        kind: "not_ready",
        message: `the cluster is restoring its deployments after a restart; ${modelId} may be one of them; retry`,
        retryable: true,
        retryAfterS: 2,
        details: { model: modelId, phase: "restoring", instances: 0 },
      };
    if (!deployed) return { kind: "absent" };
    return {
      kind: "not_ready",
      message: `${modelId} is deployed but has no instance yet (placement pending); retry`,
      retryable: true,
      retryAfterS: 5,
      details: { model: modelId, phase: "placing", instances: 0 },
    };
  }
  let best: { instance: Instance; phase: Phase } | undefined;
  for (const instance of instances) {
    const phase = instancePhase(state, instance, now);
    if (!best || phase.order > best.phase.order) best = { instance, phase };
  }
  const { instance, phase } = best!;
  // A failed instance only comes back if a deployment re-places it.
  const retryable = phase.retryAfterS !== undefined || deployed;
  const retryAfterS = phase.retryAfterS ?? (deployed ? 10 : undefined);
  const more = instances.length > 1 ? ` (${instances.length} instances, none ready)` : "";
  const tail = retryable
    ? "; retry"
    : "; delete the instance (DELETE /instance/{id}) and place it again";
  return {
    kind: "not_ready",
    message: `${modelId} ${phase.text}${more}${tail}`,
    retryable,
    retryAfterS,
    details: {
      model: modelId,
      phase: phase.phase,
      instance_id: instance.instance_id,
      node: phase.node,
      instances: instances.length,
      ...(retryAfterS !== undefined ? { retry_after_s: retryAfterS } : {}),
    },
  };
}

/** The 404 a chat request gets when the model cannot be served. */
export function notServableError(
  modelId: string,
  r: Exclude<Readiness, { kind: "ready" }>,
): ServiceError {
  if (r.kind === "absent") {
    return new ServiceError(
      "model_not_found",
      `no instance found for model ${modelId}: place it first (POST /place_instance)`,
      { details: { model: modelId } },
    );
  }
  return new ServiceError("model_not_ready", r.message, {
    details: r.details,
    retryable: r.retryable,
    ...(r.retryAfterS !== undefined ? { retryAfterS: r.retryAfterS } : {}),
  });
}

/** A staging rank 0: how far its copy is, and when to ask again at the rate seen so far. */
function stagingPhase(p: Runner["progress"], node: string, now: number): Phase {
  if (!p || p.total_bytes <= 0) {
    return { phase: "staging", order: 2, text: `is staging on ${node}`, node, retryAfterS: 5 };
  }
  const pct = Math.min(100, Math.floor((p.staged_bytes / p.total_bytes) * 100));
  const elapsedS = (now - p.started_at) / 1000;
  // Remaining bytes at the rate seen so far, plus the warmup; 5 s until a rate is known.
  const retryAfterS =
    p.staged_bytes > 0 && elapsedS > 0
      ? clamp(
          ((p.total_bytes - p.staged_bytes) * elapsedS) / p.staged_bytes + WARMUP_GUESS_S,
          1,
          60,
        )
      : 5;
  return {
    phase: "staging",
    order: 2,
    text: `is staging on ${node} (${p.staged_bytes > 0 ? `${pct}% of ` : ""}${formatBytes(p.total_bytes)})`,
    node,
    retryAfterS,
  };
}
