// The sequencer's rule: decide(state, command, ctx) -> the events to emit, or the typed refusal.
// Pure (sender, heartbeats, time and ids come from the caller), so the master is only its I/O shell.
import { kindOf, runnerKey, ServiceError } from "@ic/protocol";
import { own } from "./own.ts";
import type {
  Command,
  ControlEvent,
  ControlState,
  InstanceId,
  NodeId,
  Task,
  TaskId,
  TokenLimits,
} from "@ic/protocol";
import { checkInstance, planLoad, refusalError } from "@ic/placement";
import { placedInstance, servedOrLoading } from "./placed.ts";
import { decideScale } from "./decide-scale.ts";
import type { InstanceUse, MemoryModel, NodeReport } from "@ic/placement";

/** What a fresh id is for: the shell prefixes and randomizes it (`d-…`, `t-…`, `i-…`). */
export type IdKind = "deployment" | "task" | "instance";

/** What the shell supplies to decide one command. */
export interface DecideContext {
  /** The node the command speaks for (already checked against its bus connection). */
  readonly from: NodeId;
  /** Latest heartbeat of every live peer, self included: the placement re-check reads them. */
  readonly reports: readonly NodeReport[];
  readonly now: number;
  readonly newId: (kind: IdKind) => string;
  /** Memory model overrides, as the gateway uses them: word the re-check's refusals alike. */
  readonly memory?: Partial<MemoryModel>;
  /** The master's open tasks on an instance (its TaskTable): a deleted instance fails them. */
  readonly tasksOf?: (instanceId: string) => readonly Task[];
  /**
   * A CreateTask of a token with limits: the refusal when one is reached (the master's counts,
   * see token-limits.ts). Absent: limits are not checked.
   */
  readonly tokenCheck?: (name: string, limits: TokenLimits) => ServiceError | undefined;
  /** How each instance is used (the master's task table): what a LoadModel may unload for room. */
  readonly use?: (instanceId: string) => InstanceUse | undefined;
}

/**
 * Accepted: the events to sequence, in order (possibly none: a duplicate report), and for the
 * master's task table the task a CreateTask opened or the task a FinishTask/FailTask ended.
 * Refused: the error the command's sender receives.
 */
export type CommandDecision =
  | {
      readonly ok: true;
      readonly events: ControlEvent[];
      readonly opened?: Task;
      readonly ended?: TaskId;
      /** FinishTask: the tokens the request used (for tokens_per_minute). */
      readonly usedTokens?: number;
    }
  | { readonly ok: false; readonly error: ServiceError };

const accept = (events: ControlEvent[] = []): CommandDecision => ({ ok: true, events });
const refuse = (error: ServiceError): CommandDecision => ({ ok: false, error });

/**
 * PlaceInstance: every rank on a member, the model registered, and (the same pure check as the
 * gateway's, against this replica) the memory still there; then the instance, and its deployment
 * replacing the model's deployments that failed everywhere.
 */
function decidePlace(
  s: ControlState,
  cmd: Extract<Command, { type: "PlaceInstance" }>,
  ctx: DecideContext,
): CommandDecision {
  for (const a of cmd.instance.assignments) {
    if (!own(s.members, a.node_id)) {
      return refuse(
        new ServiceError("conflict", `node ${a.node_id} is not a member of this session`),
      );
    }
  }
  const model = own(s.models, cmd.instance.model_id);
  if (!model) {
    return refuse(
      new ServiceError("model_not_found", `model ${cmd.instance.model_id} is not registered`),
    );
  }
  // The gateway decided from its own view; this replica may already hold an instance placed
  // through another node since. The same pure check, here, settles who gets the memory.
  const refused = checkInstance(s, ctx.reports, {
    instance: cmd.instance,
    model,
    memory: ctx.memory,
  });
  if (refused) {
    return refuse(refusalError(refused));
  }
  const events: ControlEvent[] = [{ type: "InstancePlaced", instance: cmd.instance }];
  if (cmd.deployment) {
    // A new placement of a model replaces its deployments that failed everywhere they were tried.
    for (const d of Object.values(s.deployments))
      if (d.model_id === cmd.instance.model_id && d.status === "Failed")
        events.push({
          type: "DeploymentDeleted",
          deployment_id: d.deployment_id,
          reason: "superseded by a new placement of the model",
        });
    // Exclusions are kept by peer key: node ids change with every session.
    const excluded = new Set(cmd.deployment.excluded_nodes);
    events.push({
      type: "DeploymentCreated",
      deployment: {
        deployment_id: ctx.newId("deployment"),
        model_id: cmd.instance.model_id,
        min_nodes: cmd.deployment.min_nodes,
        sharding: cmd.deployment.sharding,
        ...(kindOf(cmd.deployment) !== "generate" ? { kind: kindOf(cmd.deployment) } : {}),
        ...(cmd.deployment.replica_set ? { replica_set: cmd.deployment.replica_set } : {}),
        ...(cmd.deployment.keep_alive_ms !== undefined
          ? { keep_alive_ms: cmd.deployment.keep_alive_ms }
          : {}),
        ...(cmd.deployment.scale ? { scale: cmd.deployment.scale } : {}),
        excluded_peer_keys: Object.values(s.members)
          .filter((m) => excluded.has(m.node_id))
          .map((m) => m.peer_key),
        created_at: ctx.now,
        instance_id: cmd.instance.instance_id,
        status: "Placed",
      },
    });
  }
  return accept(events);
}

/** The DeploymentDeleted of every deployment an instance realizes, with why. */
function deploymentsDeleted(
  s: ControlState,
  instanceId: string,
  why: { readonly reason: string; readonly cause?: "idle" | "room" | "scale_down" },
): ControlEvent[] {
  return Object.values(s.deployments)
    .filter((d) => d.instance_id === instanceId)
    .map((d) => ({ type: "DeploymentDeleted", deployment_id: d.deployment_id, ...why }));
}

/**
 * DeleteInstance: its deployments go (also while Pending, its instance gone), its open tasks fail,
 * then the instance.
 */
function decideDelete(
  s: ControlState,
  cmd: Extract<Command, { type: "DeleteInstance" }>,
  ctx: DecideContext,
): CommandDecision {
  // Deleting the instance deletes the intent, also while it is Pending (its instance gone).
  const events = deploymentsDeleted(s, cmd.instance_id, {
    reason: `instance ${cmd.instance_id} deleted by request`,
  });
  if (!own(s.instances, cmd.instance_id)) {
    if (events.length > 0) return accept(events);
    return refuse(new ServiceError("not_found", `no instance ${cmd.instance_id}`));
  }
  for (const t of ctx.tasksOf?.(cmd.instance_id) ?? []) {
    events.push({ type: "TaskFailed", task_id: t.task_id, reason: "instance deleted" });
  }
  events.push({
    type: "InstanceDeleted",
    instance_id: cmd.instance_id,
    reason: "deleted by request",
  });
  return accept(events);
}

/**
 * LoadModel: nothing when the model of that kind already has a deployment that is not given up, or an
 * instance (concurrent first requests, from any gateway, load it once); else placed as the reconcile
 * places, after unloading the least recently used idle on-demand instances it needs room from
 * (@ic/placement planLoad), as an on-demand deployment with its keep_alive; else the refusal.
 */
function decideLoad(
  s: ControlState,
  cmd: Extract<Command, { type: "LoadModel" }>,
  ctx: DecideContext,
): CommandDecision {
  const model = own(s.models, cmd.model_id);
  if (!model)
    return refuse(new ServiceError("model_not_found", `model ${cmd.model_id} is not registered`));
  const kind = cmd.kind ?? "generate";
  if (servedOrLoading(s, cmd.model_id, kind)) return accept();
  const plan = planLoad(
    s,
    ctx.reports,
    { model, minNodes: 1, sharding: "Pipeline", ...(ctx.memory ? { memory: ctx.memory } : {}) },
    (id) => ctx.use?.(id),
  );
  if (!plan.ok) {
    const e = refusalError(plan);
    if (!plan.busy) return refuse(e);
    // Room frees once requests in flight end: the gateway asks again within its load wait.
    return refuse(
      new ServiceError(e.code, e.message, {
        details: { ...e.details, in_use_instances: plan.busy },
        retryAfterS: 1,
      }),
    );
  }
  const events: ControlEvent[] = [];
  for (const u of plan.unload) {
    const reason = `unloaded to make room for ${cmd.model_id} (on-demand, least recently used, idle)`;
    events.push(
      { type: "DeploymentDeleted", deployment_id: u.deployment_id, reason, cause: "room" },
      { type: "InstanceDeleted", instance_id: u.instance_id as InstanceId, reason },
    );
  }
  const instanceId = ctx.newId("instance") as InstanceId;
  events.push(
    {
      type: "InstancePlaced",
      instance: placedInstance(s, {
        instance_id: instanceId,
        model_id: cmd.model_id,
        sharding: "Pipeline",
        kind,
        placement: plan.placement,
        now: ctx.now,
      }),
      reason: `loaded on demand: a request for ${cmd.model_id}`,
    },
    {
      type: "DeploymentCreated",
      deployment: {
        deployment_id: ctx.newId("deployment"),
        model_id: cmd.model_id,
        min_nodes: 1,
        sharding: "Pipeline",
        ...(kind !== "generate" ? { kind } : {}),
        on_demand: true,
        keep_alive_ms: cmd.keep_alive_ms,
        excluded_peer_keys: [],
        created_at: ctx.now,
        instance_id: instanceId,
        status: "Placed",
      },
    },
  );
  return accept(events);
}

/** UnloadInstance (the master's idle unload): the instance and its deployment, unless in use now. */
function decideUnload(
  s: ControlState,
  cmd: Extract<Command, { type: "UnloadInstance" }>,
  ctx: DecideContext,
): CommandDecision {
  if (!own(s.instances, cmd.instance_id))
    return refuse(new ServiceError("not_found", `no instance ${cmd.instance_id}`));
  if ((ctx.use?.(cmd.instance_id)?.open ?? 0) > 0)
    return refuse(
      new ServiceError("conflict", `instance ${cmd.instance_id} has requests in flight`),
    );
  return accept([
    ...deploymentsDeleted(s, cmd.instance_id, { reason: cmd.reason, cause: "idle" }),
    { type: "InstanceDeleted", instance_id: cmd.instance_id, reason: cmd.reason },
  ]);
}

/**
 * Every event is decided against `state` as it was before the command: the events of one command
 * never depend on each other's application. Refusals emit nothing.
 */
export function decide(state: ControlState, cmd: Command, ctx: DecideContext): CommandDecision {
  const s = state;
  switch (cmd.type) {
    case "PlaceInstance":
      return decidePlace(s, cmd, ctx);
    case "DeleteInstance":
      return decideDelete(s, cmd, ctx);
    case "LoadModel":
      return decideLoad(s, cmd, ctx);
    case "UnloadInstance":
      return decideUnload(s, cmd, ctx);
    case "ScaleReplicas":
      return decideScale(s, cmd, ctx);
    case "RegisterModel": {
      const prev = own(s.models, cmd.model.model_id);
      if (prev && JSON.stringify(prev) === JSON.stringify(cmd.model)) return accept();
      return accept([{ type: "ModelRegistered", model: cmd.model }]);
    }
    case "DeregisterModel": {
      if (!own(s.models, cmd.model_id)) return accept();
      const user = modelUser(s, cmd.model_id);
      if (user) return refuse(new ServiceError("conflict", `${cmd.model_id} is in use: ${user}`));
      return accept([{ type: "ModelDeregistered", model_id: cmd.model_id }]);
    }
    case "ReportRunner": {
      const r = cmd.runner;
      if (!own(s.instances, r.instance_id)) return accept();
      // A report that changes nothing a reader sees is not sequenced (workers repeat them).
      const prev = s.runners[runnerKey(r.instance_id, r.rank)];
      if (
        prev &&
        prev.state === r.state &&
        prev.endpoint === r.endpoint &&
        prev.reason === r.reason &&
        prev.restarts === r.restarts &&
        prev.warmup_started_at === r.warmup_started_at &&
        prev.last_error === r.last_error &&
        prev.progress?.staged_bytes === r.progress?.staged_bytes
      ) {
        return accept();
      }
      return accept([
        { type: r.state === "RunnerFailed" ? "RunnerFailed" : "RunnerStatus", runner: r },
      ]);
    }
    case "CreateTask": {
      if (!own(s.instances, cmd.instance_id)) {
        return refuse(new ServiceError("instance_lost", `instance ${cmd.instance_id} is gone`));
      }
      if (cmd.token && ctx.tokenCheck) {
        const limited = ctx.tokenCheck(cmd.token.name, cmd.token.limits);
        if (limited) return refuse(limited);
      }
      const opened: Task = {
        task_id: ctx.newId("task") as TaskId,
        command_id: cmd.command_id,
        model_id: cmd.model_id,
        instance_id: cmd.instance_id,
        gateway_node_id: ctx.from,
        created_at: ctx.now,
        ...(cmd.token ? { token: cmd.token.name } : {}),
      };
      return { ok: true, events: [], opened };
    }
    // The gateway that holds a task knows how it ended; only the master's table changes.
    case "FinishTask":
      return {
        ok: true,
        events: [],
        ended: cmd.task_id,
        ...(cmd.tokens !== undefined ? { usedTokens: cmd.tokens } : {}),
      };
    case "FailTask":
      return { ok: true, events: [], ended: cmd.task_id };
    case "ReportDownloadFailed":
      return accept([
        { type: "DownloadFailed", node_id: ctx.from, model_id: cmd.model_id, reason: cmd.reason },
      ]);
  }
}

/** What keeps a model from leaving the registry: an instance, a deployment, or a model it drafts for. */
export function modelUser(s: ControlState, modelId: string): string | undefined {
  const inst = Object.values(s.instances).find((i) => i.model_id === modelId);
  if (inst) return `instance ${inst.instance_id} serves it; delete the instance first`;
  const dep = Object.values(s.deployments).find((d) => d.model_id === modelId);
  if (dep) return `deployment ${dep.deployment_id} asks for it; delete its instance first`;
  const base = Object.values(s.models).find((m) => m.drafter === modelId);
  if (base) return `it is the drafter of ${base.model_id}`;
  return undefined;
}
