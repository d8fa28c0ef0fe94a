// The standard world of decide's table tests (decide.test.ts, decide-capacity.test.ts): two members,
// a model, an instance staging and two deployments, the context a command is decided in, and the
// changes the capacity rows start from. Test-only; not exported by index.ts.
import { runnerKey } from "@ic/protocol";
import type {
  Command,
  CommandId,
  ControlState,
  InstanceId,
  ModelId,
  NodeId,
  Runner,
  Task,
  TaskId,
} from "@ic/protocol";
import { decide } from "./decide.ts";
import type { DecideContext, IdKind } from "./decide.ts";
import { BARE, G, instanceOn as instance, model, replicaWith, report } from "./test-support.ts";

/** The commands of capacity that follows demand, whose rows are in decide-capacity.test.ts. */
export const CAPACITY_COMMANDS = ["LoadModel", "UnloadInstance", "ScaleReplicas"] as const;

export const other = { ...model, model_id: "org/other" as ModelId };

export const runner = (over: Partial<Runner> = {}): Runner => ({
  instance_id: "i-1" as InstanceId,
  node_id: "n-b" as NodeId,
  rank: 0,
  state: "RunnerStaging",
  restarts: 0,
  since: 1,
  progress: { staged_bytes: 100, total_bytes: 6 * G, started_at: 1 },
  ...over,
});

/**
 * Members a and b (10 GB each), model `org/m` registered, instance i-1 on b with runner rank 0
 * staging, deployment d-1 realized by i-1, and deployment d-2 Pending (its
 * instance i-gone lost).
 */
export function world(): ControlState {
  const s = replicaWith(["a", "b"]);
  s.index = 7;
  s.instances["i-1"] = instance("i-1");
  s.runners[runnerKey("i-1", 0)] = runner();
  const dep = { model_id: model.model_id, min_nodes: 1, sharding: "Pipeline" as const };
  s.deployments["d-1"] = {
    ...dep,
    deployment_id: "d-1",
    excluded_peer_keys: [],
    created_at: 0,
    instance_id: "i-1" as InstanceId,
    status: "Placed",
  };
  s.deployments["d-2"] = {
    ...dep,
    deployment_id: "d-2",
    excluded_peer_keys: [],
    created_at: 0,
    instance_id: "i-gone" as InstanceId,
    status: "Pending",
    refusal: { code: "insufficient_memory", message: "no room" },
  };
  return s;
}

/** `org/other` registered, and d-1 (i-1 on b) loaded on demand, its Pending sibling d-2 gone. */
export function onDemandInTheWay(s: ControlState): void {
  s.models[other.model_id] = other;
  s.deployments["d-1"] = { ...s.deployments["d-1"]!, on_demand: true };
  delete s.deployments["d-2"];
}

/** d-1 (i-1 on b) is the one replica of rs-1, which follows load (1 to 2 replicas). */
export function scalingSet(s: ControlState): void {
  s.deployments["d-1"] = {
    ...s.deployments["d-1"]!,
    replica_set: "rs-1",
    scale: { min_replicas: 1, max_replicas: 2, up_at: 4 },
  };
  delete s.deployments["d-2"];
}

/** The master's open task t-1 on i-1 (its TaskTable; tasks are not in the replicated state). */
export const openTask: Task = {
  task_id: "t-1" as TaskId,
  command_id: "c-1" as CommandId,
  model_id: model.model_id,
  instance_id: "i-1" as InstanceId,
  gateway_node_id: "n-a" as NodeId,
  created_at: 0,
};

export const ctx = (over: Partial<DecideContext> = {}): DecideContext => ({
  from: "n-a" as NodeId,
  reports: [report("a"), report("b")],
  now: 42,
  newId: (kind: IdKind) => `${kind}-new`,
  memory: BARE,
  tasksOf: (id) => (id === openTask.instance_id ? [openTask] : []),
  ...over,
});

export type Row = {
  name: string;
  cmd: Command;
  /** Changes to the standard world before deciding. */
  state?: (s: ControlState) => void;
  ctx?: Partial<DecideContext>;
} & ({ events: string[] } | { error: string });

/** Decides a row against the standard world: the state untouched, then its events or its refusal. */
export function decideRow(row: Row): { got: string | string[]; want: string | string[] } {
  const s = world();
  row.state?.(s);
  const before = JSON.stringify(s);
  const d = decide(s, row.cmd, ctx(row.ctx));
  if (JSON.stringify(s) !== before) throw new Error("decide changed the state it was given");
  const got = d.ok ? d.events.map((e) => e.type) : d.error.code;
  return { got, want: "error" in row ? row.error : row.events };
}
