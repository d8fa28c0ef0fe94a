// Table tests of decide for capacity that follows demand (docs/capacity.md): LoadModel (one load,
// room from idle on-demand instances only), UnloadInstance (never while in use) and ScaleReplicas
// (within the set's bounds, on nodes its siblings do not use; down retires the least busy replica,
// the newest of those, and deletes it once it has no request open; up recalls it first).
import { describe, expect, it } from "vitest";
import type { InstanceId } from "@ic/protocol";
import { decide } from "./decide.ts";
import { instanceOn as instance, model, report } from "./test-support.ts";
import {
  CAPACITY_COMMANDS,
  ctx,
  decideRow,
  onDemandInTheWay,
  other,
  scalingSet,
  world,
} from "./decide-world.ts";
import type { Row } from "./decide-world.ts";

const rows: Row[] = [
  // LoadModel
  {
    name: "loads a registered model nothing serves, as an on-demand deployment",
    cmd: { type: "LoadModel", model_id: other.model_id, keep_alive_ms: 0 },
    state: (s) => void (s.models[other.model_id] = other),
    events: ["InstancePlaced", "DeploymentCreated"],
  },
  {
    name: "loads nothing when the model already has a deployment (a concurrent first request)",
    cmd: { type: "LoadModel", model_id: model.model_id, keep_alive_ms: 0 },
    events: [],
  },
  {
    name: "refuses to load an unknown model",
    cmd: { type: "LoadModel", model_id: other.model_id, keep_alive_ms: 0 },
    error: "model_not_found",
  },
  {
    name: "unloads the idle on-demand instance it needs the room of, then loads",
    cmd: { type: "LoadModel", model_id: other.model_id, keep_alive_ms: 0 },
    state: onDemandInTheWay,
    ctx: { reports: [report("a", 1), report("b")], use: () => ({ open: 0, lastUsedAt: 1 }) },
    events: ["DeploymentDeleted", "InstanceDeleted", "InstancePlaced", "DeploymentCreated"],
  },
  {
    name: "refuses a load whose only room is held by an instance with requests in flight",
    cmd: { type: "LoadModel", model_id: other.model_id, keep_alive_ms: 0 },
    state: onDemandInTheWay,
    ctx: { reports: [report("a", 1), report("b")], use: () => ({ open: 1, lastUsedAt: 1 }) },
    error: "insufficient_memory",
  },
  {
    name: "refuses a load whose only room is held by an operator's placement",
    cmd: { type: "LoadModel", model_id: other.model_id, keep_alive_ms: 0 },
    state: (s) => void (s.models[other.model_id] = other),
    ctx: { reports: [report("a", 1), report("b")], use: () => ({ open: 0, lastUsedAt: 1 }) },
    error: "insufficient_memory",
  },
  // UnloadInstance
  {
    name: "unloads an idle instance with its deployment",
    cmd: { type: "UnloadInstance", instance_id: "i-1" as InstanceId, reason: "idle" },
    ctx: { use: () => ({ open: 0 }) },
    events: ["DeploymentDeleted", "InstanceDeleted"],
  },
  {
    name: "refuses to unload an instance a request began on meanwhile",
    cmd: { type: "UnloadInstance", instance_id: "i-1" as InstanceId, reason: "idle" },
    ctx: { use: () => ({ open: 1 }) },
    error: "conflict",
  },
  {
    name: "refuses to unload an instance already gone",
    cmd: { type: "UnloadInstance", instance_id: "i-gone" as InstanceId, reason: "idle" },
    error: "not_found",
  },
  // ScaleReplicas
  {
    name: "adds a replica to a set that follows load, on a node its siblings do not use",
    cmd: { type: "ScaleReplicas", replica_set: "rs-1", direction: "up", reason: "busy" },
    state: scalingSet,
    events: ["InstancePlaced", "DeploymentCreated"],
  },
  {
    name: "refuses to grow a set past its most",
    cmd: { type: "ScaleReplicas", replica_set: "rs-1", direction: "up", reason: "busy" },
    state: (s) => {
      scalingSet(s);
      s.deployments["d-1"]!.scale = { min_replicas: 1, max_replicas: 1, up_at: 4 };
    },
    error: "conflict",
  },
  {
    name: "refuses to shrink a set below its least",
    cmd: { type: "ScaleReplicas", replica_set: "rs-1", direction: "down", reason: "quiet" },
    state: scalingSet,
    error: "conflict",
  },
  {
    name: "retires an idle replica of a set that follows load (nothing deleted yet)",
    cmd: { type: "ScaleReplicas", replica_set: "rs-1", direction: "down", reason: "quiet" },
    state: (s) => {
      scalingSet(s);
      s.deployments["d-3"] = { ...s.deployments["d-1"]!, deployment_id: "d-3", created_at: 5 };
    },
    ctx: { use: () => ({ open: 0 }) },
    events: ["DeploymentRetiring"],
  },
  {
    name: "retires a replica while every one has requests in flight (they end on it)",
    cmd: { type: "ScaleReplicas", replica_set: "rs-1", direction: "down", reason: "quiet" },
    state: (s) => {
      scalingSet(s);
      s.deployments["d-3"] = { ...s.deployments["d-1"]!, deployment_id: "d-3", created_at: 5 };
    },
    ctx: { use: () => ({ open: 1 }) },
    events: ["DeploymentRetiring"],
  },
  {
    name: "deletes the retiring replica once it has no request open",
    cmd: { type: "ScaleReplicas", replica_set: "rs-1", direction: "down", reason: "ended" },
    state: (s) => {
      scalingSet(s);
      s.deployments["d-3"] = {
        ...s.deployments["d-1"]!,
        deployment_id: "d-3",
        created_at: 5,
        retiring_since: 40,
      };
    },
    ctx: { use: () => ({ open: 0 }) },
    events: ["DeploymentDeleted", "InstanceDeleted"],
  },
  {
    name: "refuses to delete the retiring replica while a request is open on it",
    cmd: { type: "ScaleReplicas", replica_set: "rs-1", direction: "down", reason: "ended" },
    state: (s) => {
      scalingSet(s);
      s.deployments["d-1"] = { ...s.deployments["d-1"]!, retiring_since: 40 };
      s.deployments["d-3"] = { ...s.deployments["d-1"]!, deployment_id: "d-3", created_at: 5 };
      delete s.deployments["d-3"].retiring_since;
    },
    ctx: { use: (id) => ({ open: id === "i-1" ? 1 : 0 }) },
    error: "conflict",
  },
  {
    name: "recalls the retiring replica instead of placing one more, even at the set's most",
    cmd: { type: "ScaleReplicas", replica_set: "rs-1", direction: "up", reason: "busy" },
    state: (s) => {
      scalingSet(s);
      s.deployments["d-1"] = { ...s.deployments["d-1"]!, retiring_since: 40 };
      s.deployments["d-3"] = { ...s.deployments["d-1"]!, deployment_id: "d-3", created_at: 5 };
      delete s.deployments["d-3"].retiring_since;
    },
    events: ["DeploymentRecalled"],
  },
  {
    name: "refuses a set that does not scale",
    cmd: { type: "ScaleReplicas", replica_set: "rs-none", direction: "up", reason: "busy" },
    error: "not_found",
  },
];

describe("decide: capacity", () => {
  it.each(rows)("$name", (row) => {
    const { got, want } = decideRow(row);
    expect(got).toEqual(want);
  });

  it("has a row for each of its commands", () => {
    expect(new Set(rows.map((r) => r.cmd.type))).toEqual(new Set(CAPACITY_COMMANDS));
  });

  it("an on-demand load: its deployment carries the policy, its unloads the cause and the reason", () => {
    const s = world();
    onDemandInTheWay(s);
    const d = decide(
      s,
      { type: "LoadModel", model_id: other.model_id, keep_alive_ms: 30_000 },
      ctx({ reports: [report("a", 1), report("b")], use: () => ({ open: 0, lastUsedAt: 1 }) }),
    );
    if (!d.ok) throw d.error;
    const [deleted, , placed, created] = d.events;
    expect(deleted).toMatchObject({ deployment_id: "d-1", cause: "room" });
    expect(deleted).toHaveProperty("reason", expect.stringContaining("to make room for org/other"));
    expect(placed).toMatchObject({
      type: "InstancePlaced",
      instance: { instance_id: "instance-new", assignments: [{ node_id: "n-b" }] },
    });
    expect(created).toMatchObject({
      type: "DeploymentCreated",
      deployment: { on_demand: true, keep_alive_ms: 30_000, instance_id: "instance-new" },
    });
  });

  it("a load refused only because the room is in use says so, to be asked again", () => {
    const s = world();
    onDemandInTheWay(s);
    const d = decide(
      s,
      { type: "LoadModel", model_id: other.model_id, keep_alive_ms: 0 },
      ctx({ reports: [report("a", 1), report("b")], use: () => ({ open: 1, lastUsedAt: 1 }) }),
    );
    if (d.ok) throw new Error("accepted");
    expect(d.error.details).toMatchObject({ in_use_instances: 1 });
    expect(d.error.retryAfterS).toBe(1);
  });

  it("a replica added for load: on a node its siblings do not use, the set's policy, the reason", () => {
    const s = world();
    scalingSet(s);
    const d = decide(
      s,
      { type: "ScaleReplicas", replica_set: "rs-1", direction: "up", reason: "9 in flight" },
      ctx(),
    );
    if (!d.ok) throw d.error;
    expect(d.events).toMatchObject([
      {
        type: "InstancePlaced",
        instance: { assignments: [{ node_id: "n-a" }] },
        reason: "9 in flight",
      },
      {
        type: "DeploymentCreated",
        deployment: {
          replica_set: "rs-1",
          scale: { max_replicas: 2 },
          instance_id: "instance-new",
        },
        reason: "9 in flight",
      },
    ]);
  });

  it("a replica retired for quiet is the least busy, the newest of those; deleted once idle", () => {
    const s = world();
    scalingSet(s);
    s.instances["i-3"] = instance("i-3", "a");
    s.deployments["d-3"] = {
      ...s.deployments["d-1"]!,
      deployment_id: "d-3",
      instance_id: "i-3" as InstanceId,
      created_at: 5,
    };
    const d = decide(
      s,
      { type: "ScaleReplicas", replica_set: "rs-1", direction: "down", reason: "quiet" },
      ctx({ use: (id) => ({ open: id === "i-3" ? 1 : 0 }) }),
    );
    if (!d.ok) throw d.error;
    // i-3 is the newest but busy: i-1 retires.
    expect(d.events).toEqual([
      { type: "DeploymentRetiring", deployment_id: "d-1", since: 42, reason: "quiet" },
    ]);
    // Both idle: the newest retires.
    const idle = decide(
      s,
      { type: "ScaleReplicas", replica_set: "rs-1", direction: "down", reason: "quiet" },
      ctx({ use: () => ({ open: 0 }) }),
    );
    expect(idle.ok && idle.events).toMatchObject([{ deployment_id: "d-3" }]);
    // Retiring, asked again: deleted with its instance, the cause counted as a scale-down.
    s.deployments["d-1"] = { ...s.deployments["d-1"]!, retiring_since: 42 };
    const gone = decide(
      s,
      { type: "ScaleReplicas", replica_set: "rs-1", direction: "down", reason: "ended" },
      ctx({ use: (id) => ({ open: id === "i-3" ? 1 : 0 }) }),
    );
    if (!gone.ok) throw gone.error;
    expect(gone.events).toEqual([
      { type: "DeploymentDeleted", deployment_id: "d-1", reason: "ended", cause: "scale_down" },
      { type: "InstanceDeleted", instance_id: "i-1", reason: "ended" },
    ]);
  });
});
