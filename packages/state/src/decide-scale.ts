// The sequencer's rule for ScaleReplicas (replicas that follow load, docs/capacity.md): the events of
// one step up or down of a replica set, or the typed refusal. Pure, as decide.ts; the master's tick
// decides when (scaling.ts).
import { kindOf, ServiceError } from "@ic/protocol";
import type { Command, ControlEvent, ControlState, Deployment, InstanceId } from "@ic/protocol";
import { placeInCluster, refusalError } from "@ic/placement";
import { placedInstance } from "./placed.ts";
import type { CommandDecision, DecideContext } from "./decide.ts";
import { own } from "./own.ts";

const accept = (events: ControlEvent[]): CommandDecision => ({ ok: true, events });
const refuse = (error: ServiceError): CommandDecision => ({ ok: false, error });

/**
 * ScaleReplicas (the master's, from scaling.ts). Up: the set's retiring replica kept (recalled), or
 * one more deployment on nodes none of its siblings uses, placed as the reconcile places. Down, in
 * two steps that drain before they break: a replica retires (the one with the fewest requests open,
 * the newest of those; gateways send it no new request while a sibling is ready), then, asked again,
 * the retiring one is deleted once it has no request open. Within the policy's bounds; refused
 * otherwise.
 */
export function decideScale(
  s: ControlState,
  cmd: Extract<Command, { type: "ScaleReplicas" }>,
  ctx: DecideContext,
): CommandDecision {
  const set = Object.values(s.deployments)
    .filter((d) => d.replica_set === cmd.replica_set && d.scale)
    .sort((a, b) => a.created_at - b.created_at || a.deployment_id.localeCompare(b.deployment_id));
  const first = set[0];
  if (!first?.scale)
    return refuse(new ServiceError("not_found", `no replica set ${cmd.replica_set} that scales`));
  return cmd.direction === "down" ? scaleDown(s, set, cmd, ctx) : scaleUp(s, set, cmd, ctx);
}

function scaleDown(
  s: ControlState,
  set: readonly Deployment[],
  cmd: Extract<Command, { type: "ScaleReplicas" }>,
  ctx: DecideContext,
): CommandDecision {
  const open = (d: Deployment) => ctx.use?.(d.instance_id)?.open ?? 0;
  const retiring = set.find((d) => d.retiring_since !== undefined);
  if (retiring) {
    if (open(retiring) > 0)
      return refuse(
        new ServiceError(
          "conflict",
          `${retiring.deployment_id} retires: ${open(retiring)} request(s) still open on it`,
        ),
      );
    const events: ControlEvent[] = [
      {
        type: "DeploymentDeleted",
        deployment_id: retiring.deployment_id,
        reason: cmd.reason,
        cause: "scale_down",
      },
    ];
    if (own(s.instances, retiring.instance_id))
      events.push({
        type: "InstanceDeleted",
        instance_id: retiring.instance_id,
        reason: cmd.reason,
      });
    return accept(events);
  }
  const min = set[0]!.scale!.min_replicas;
  if (set.length <= min)
    return refuse(
      new ServiceError("conflict", `${cmd.replica_set} has ${min} replica(s), its least`),
    );
  // The fewest requests open drains soonest; of those the newest (the oldest holds the longest
  // learned caches, and a set shrinks back towards its first replicas).
  const fewest = Math.min(...set.map(open));
  const victim = set.filter((d) => open(d) === fewest).at(-1)!;
  return accept([
    {
      type: "DeploymentRetiring",
      deployment_id: victim.deployment_id,
      since: ctx.now,
      reason: cmd.reason,
    },
  ]);
}

function scaleUp(
  s: ControlState,
  set: readonly Deployment[],
  cmd: Extract<Command, { type: "ScaleReplicas" }>,
  ctx: DecideContext,
): CommandDecision {
  const retiring = set.find((d) => d.retiring_since !== undefined);
  if (retiring)
    return accept([
      { type: "DeploymentRecalled", deployment_id: retiring.deployment_id, reason: cmd.reason },
    ]);
  const first = set[0]!;
  const max = first.scale!.max_replicas;
  if (set.length >= max)
    return refuse(
      new ServiceError("conflict", `${cmd.replica_set} has ${max} replica(s), its most`),
    );
  const model = own(s.models, first.model_id);
  if (!model)
    return refuse(new ServiceError("model_not_found", `model ${first.model_id} is not registered`));
  const byPeer = new Map(Object.values(s.members).map((m) => [m.peer_key, m.node_id]));
  const excluded = [
    ...set.flatMap((d) => s.instances[d.instance_id]?.assignments.map((a) => a.node_id) ?? []),
    ...first.excluded_peer_keys.flatMap((k) => byPeer.get(k) ?? []),
  ];
  const r = placeInCluster(s, ctx.reports, {
    model,
    minNodes: first.min_nodes,
    sharding: first.sharding,
    excluded,
    ...(ctx.memory ? { memory: ctx.memory } : {}),
  });
  if (!r.ok) return refuse(refusalError(r));
  const instanceId = ctx.newId("instance") as InstanceId;
  const {
    deployment_id: _id,
    instance_id: _i,
    status: _s,
    refusal: _r,
    failures: _f,
    ...kept
  } = first;
  return accept([
    {
      type: "InstancePlaced",
      instance: placedInstance(s, {
        instance_id: instanceId,
        model_id: first.model_id,
        sharding: first.sharding,
        kind: kindOf(first),
        placement: r,
        now: ctx.now,
      }),
      reason: cmd.reason,
    },
    {
      type: "DeploymentCreated",
      deployment: {
        ...kept,
        deployment_id: ctx.newId("deployment"),
        created_at: ctx.now,
        instance_id: instanceId,
        status: "Placed",
      },
      reason: cmd.reason,
    },
  ]);
}
