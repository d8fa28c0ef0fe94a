// Table tests of decide: every command type against a small replica, accepted (the events it
// sequences, in order) or refused (the typed error), with the placement re-check's race refusals.
import { describe, expect, it } from "vitest";
import { CommandSchema, ServiceError } from "@ic/protocol";
import type {
  Command,
  CommandId,
  Instance,
  InstanceId,
  ModelId,
  NodeId,
  Runner,
  TaskId,
} from "@ic/protocol";
import { decide } from "./decide.ts";
import { G, instanceOn as instance, model, report } from "./test-support.ts";
import { CAPACITY_COMMANDS, ctx, other, runner, decideRow, world } from "./decide-world.ts";
import type { Row } from "./decide-world.ts";

const place = (
  i: Instance,
  deployment?: Extract<Command, { type: "PlaceInstance" }>["deployment"],
): Command => ({ type: "PlaceInstance", instance: i, ...(deployment ? { deployment } : {}) });
const report_ = (over: Partial<Runner>): Command => ({
  type: "ReportRunner",
  runner: runner(over),
});

const rows: Row[] = [
  // PlaceInstance
  {
    name: "places an instance that fits",
    cmd: place(instance("i-2", "a")),
    events: ["InstancePlaced"],
  },
  {
    name: "places an instance and keeps its deployment",
    cmd: place(instance("i-2", "a"), { min_nodes: 1, sharding: "Pipeline", excluded_nodes: [] }),
    events: ["InstancePlaced", "DeploymentCreated"],
  },
  {
    name: "refuses an unknown model",
    cmd: place(instance("i-2", "a", "org/nope" as ModelId)),
    error: "model_not_found",
  },
  {
    name: "refuses a node that is not a member",
    cmd: place(instance("i-2", "z")),
    error: "conflict",
  },
  {
    name: "refuses a share that no longer fits (a race lost to i-1 on the same node)",
    cmd: place(instance("i-2", "b")),
    error: "insufficient_memory",
  },
  {
    name: "refuses a node whose engine is unusable",
    cmd: place(instance("i-2", "a")),
    ctx: { reports: [report("a", 10, { usable: false }), report("b")] },
    error: "node_unhealthy",
  },
  {
    name: "waits for a node whose memory is not heard yet",
    cmd: place(instance("i-2", "a")),
    ctx: { reports: [report("b")] },
    error: "info_pending",
  },
  // Ids that name Object.prototype members are unknown ids, not existing records.
  ...["constructor", "__proto__", "toString"].map((id) => ({
    name: `refuses to delete "${id}" (an Object.prototype member, not an instance)`,
    cmd: { type: "DeleteInstance" as const, instance_id: id as InstanceId },
    error: "not_found" as const,
  })),
  // DeleteInstance
  {
    name: "deletes an instance with its deployment, failing its tasks first",
    cmd: { type: "DeleteInstance", instance_id: "i-1" as InstanceId },
    events: ["DeploymentDeleted", "TaskFailed", "InstanceDeleted"],
  },
  {
    name: "deletes a Pending deployment whose instance is gone",
    cmd: { type: "DeleteInstance", instance_id: "i-gone" as InstanceId },
    events: ["DeploymentDeleted"],
  },
  {
    name: "refuses to delete an instance it never had",
    cmd: { type: "DeleteInstance", instance_id: "i-none" as InstanceId },
    error: "not_found",
  },
  // RegisterModel
  {
    name: "registers a new model",
    cmd: { type: "RegisterModel", model: other },
    events: ["ModelRegistered"],
  },
  {
    name: "registers changed facts of a known model again",
    cmd: { type: "RegisterModel", model: { ...model, bytes: 7 * G } },
    events: ["ModelRegistered"],
  },
  { name: "ignores an identical registration", cmd: { type: "RegisterModel", model }, events: [] },
  // DeregisterModel
  {
    name: "refuses to deregister a model an instance serves",
    cmd: { type: "DeregisterModel", model_id: model.model_id },
    error: "conflict",
  },
  {
    name: "refuses to deregister a model a deployment still asks for",
    cmd: { type: "DeregisterModel", model_id: model.model_id },
    state: (s) => {
      delete s.instances["i-1"];
      delete s.deployments["d-1"];
    },
    error: "conflict",
  },
  {
    name: "refuses to deregister the drafter of a registered model",
    cmd: { type: "DeregisterModel", model_id: other.model_id },
    state: (s) => {
      s.models[other.model_id] = other;
      s.models[model.model_id] = { ...model, drafter: other.model_id };
    },
    error: "conflict",
  },
  {
    name: "deregisters a model nothing uses",
    cmd: { type: "DeregisterModel", model_id: other.model_id },
    state: (s) => {
      s.models[other.model_id] = other;
    },
    events: ["ModelDeregistered"],
  },
  {
    name: "ignores deregistering a model it does not know",
    cmd: { type: "DeregisterModel", model_id: "org/none" as ModelId },
    events: [],
  },
  // ReportRunner
  { name: "ignores a duplicate runner report", cmd: report_({}), events: [] },
  {
    name: "sequences a staging progress change",
    cmd: report_({ progress: { staged_bytes: 200, total_bytes: 6 * G, started_at: 1 } }),
    events: ["RunnerStatus"],
  },
  {
    name: "ignores a change of `since` alone",
    cmd: report_({ since: 99 }),
    events: [],
  },
  {
    name: "sequences a new warm-up start",
    cmd: report_({ state: "RunnerStaging", warmup_started_at: 5 }),
    events: ["RunnerStatus"],
  },
  {
    name: "sequences a state change",
    cmd: report_({ state: "RunnerReady", endpoint: "http://b:9000", progress: undefined }),
    events: ["RunnerStatus"],
  },
  {
    name: "sequences a failure as RunnerFailed",
    cmd: report_({ state: "RunnerFailed", reason: "crashed" }),
    events: ["RunnerFailed"],
  },
  {
    name: "sequences the first report of a rank",
    cmd: report_({}),
    state: (s) => {
      s.runners = {};
    },
    events: ["RunnerStatus"],
  },
  {
    name: "ignores a report for an instance that is gone",
    cmd: report_({ instance_id: "i-gone" as InstanceId }),
    events: [],
  },
  // Tasks
  {
    name: "creates a task on a live instance",
    cmd: {
      type: "CreateTask",
      command_id: "c-2" as CommandId,
      model_id: model.model_id,
      instance_id: "i-1" as InstanceId,
    },
    events: [], // opened in the master's task table, not replicated
  },
  {
    name: "refuses a task on an instance that is gone",
    cmd: {
      type: "CreateTask",
      command_id: "c-2" as CommandId,
      model_id: model.model_id,
      instance_id: "i-gone" as InstanceId,
    },
    error: "instance_lost",
  },
  {
    name: "finishes a task: only the master's table changes",
    cmd: { type: "FinishTask", task_id: "t-1" as TaskId },
    events: [],
  },
  {
    name: "a task its gateway failed: only the master's table changes",
    cmd: { type: "FailTask", task_id: "t-1" as TaskId, reason: "upstream" },
    events: [],
  },
  // Downloads
  {
    name: "records a failed download",
    cmd: { type: "ReportDownloadFailed", model_id: model.model_id, reason: "404" },
    events: ["DownloadFailed"],
  },
];

describe("decide", () => {
  it.each(rows)("$name", (row) => {
    const { got, want } = decideRow(row);
    expect(got).toEqual(want);
  });

  it("has a row for every command type (capacity's in decide-capacity.test.ts)", () => {
    const all = CommandSchema.options.map((o) => o.shape.type.value);
    expect(new Set([...rows.map((r) => r.cmd.type), ...CAPACITY_COMMANDS])).toEqual(new Set(all));
  });

  it("the deployment keeps exclusions by peer key, the context's id and time", () => {
    const d = decide(
      world(),
      place(instance("i-2", "a"), {
        min_nodes: 1,
        sharding: "Pipeline",
        excluded_nodes: ["n-b", "n-gone"],
      }),
      ctx(),
    );
    expect(d.ok && d.events[1]).toEqual({
      type: "DeploymentCreated",
      deployment: {
        deployment_id: "deployment-new",
        model_id: "org/m",
        min_nodes: 1,
        sharding: "Pipeline",
        excluded_peer_keys: ["p-b"],
        created_at: 42,
        instance_id: "i-2",
        status: "Placed",
      },
    });
  });

  it("a lost race is refused with the node named and the reservation explained", () => {
    const d = decide(world(), place(instance("i-2", "b")), ctx());
    expect(d.ok).toBe(false);
    if (d.ok) return;
    expect(d.error.details).toEqual({ node_id: "n-b" });
    expect(d.error.message).toContain("node-b (n-b) cannot fit its share");
    expect(d.error.message).toContain("6.00 GB of its 10.00 GB is reserved");
  });

  it("node_unhealthy names the node and its health code", () => {
    const d = decide(
      world(),
      place(instance("i-2", "a")),
      ctx({ reports: [report("a", 10, { usable: false })] }),
    );
    expect(d.ok ? null : d.error.details).toEqual({
      node_id: "n-a",
      health_code: "invalid_engine_binary",
    });
  });

  it("a task is created for the sender with the context's id, which the reply carries", () => {
    const d = decide(
      world(),
      {
        type: "CreateTask",
        command_id: "c-2" as CommandId,
        model_id: model.model_id,
        instance_id: "i-1" as InstanceId,
      },
      ctx({ from: "n-b" as NodeId }),
    );
    expect(d).toEqual({
      ok: true,
      events: [],
      opened: {
        task_id: "task-new",
        command_id: "c-2",
        model_id: "org/m",
        instance_id: "i-1",
        gateway_node_id: "n-b",
        created_at: 42,
      },
    });
  });

  it("a task of a token with limits: opened with the token's name when the check passes, refused with its error when not", () => {
    const cmd: Command = {
      type: "CreateTask",
      command_id: "c-3" as CommandId,
      model_id: model.model_id,
      instance_id: "i-1" as InstanceId,
      token: { name: "alice", limits: { requests_per_minute: 5 } },
    };
    const asked: unknown[] = [];
    const pass = decide(world(), cmd, ctx({ tokenCheck: (...a) => void asked.push(a) }));
    expect(asked).toEqual([["alice", { requests_per_minute: 5 }]]);
    expect(pass.ok && pass.opened?.token).toBe("alice");
    const limited = new ServiceError("rate_limited", "over");
    expect(decide(world(), cmd, ctx({ tokenCheck: () => limited }))).toEqual({
      ok: false,
      error: limited,
    });
    // A command without a token is never checked.
    const { token: _, ...plain } = cmd;
    const never = decide(world(), plain, ctx({ tokenCheck: () => limited }));
    expect(never.ok && never.opened?.token).toBeUndefined();
  });

  it("a finished task's tokens are passed on for the token's window", () => {
    expect(
      decide(world(), { type: "FinishTask", task_id: "t-1" as TaskId, tokens: 12 }, ctx()),
    ).toEqual({ ok: true, events: [], ended: "t-1", usedTokens: 12 });
  });

  it("an ended task is named for the master's table, whether it finished or failed", () => {
    for (const cmd of [
      { type: "FinishTask" as const, task_id: "t-1" as TaskId },
      { type: "FailTask" as const, task_id: "t-1" as TaskId, reason: "x" },
    ])
      expect(decide(world(), cmd, ctx())).toEqual({ ok: true, events: [], ended: "t-1" });
  });

  it("a failed download names the sender", () => {
    const d = decide(
      world(),
      { type: "ReportDownloadFailed", model_id: model.model_id, reason: "404" },
      ctx({ from: "n-b" as NodeId }),
    );
    expect(d.ok && d.events).toEqual([
      { type: "DownloadFailed", node_id: "n-b", model_id: "org/m", reason: "404" },
    ]);
  });

  it("deleting fails exactly the tasks of that instance", () => {
    const d = decide(world(), { type: "DeleteInstance", instance_id: "i-1" as InstanceId }, ctx());
    expect(d.ok && d.events[1]).toEqual({
      type: "TaskFailed",
      task_id: "t-1",
      reason: "instance deleted",
    });
  });
});
