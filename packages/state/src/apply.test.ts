import { describe, expect, it } from "vitest";
import { emptyState } from "@ic/protocol";
import type {
  ControlEvent,
  ControlState,
  IndexedEvent,
  Instance,
  ModelId,
  NodeId,
  SessionId,
  InstanceId,
  TaskId,
} from "@ic/protocol";
import { model as registered } from "./test-support.ts";
import { apply, OutOfOrderEvent } from "./apply.ts";

const S = "s1" as SessionId;
const n1 = "n-1" as NodeId;
const n2 = "n-2" as NodeId;
const model = "org/tiny" as ModelId;

function member(id: NodeId, peer: string) {
  return {
    node_id: id,
    peer_key: peer,
    name: peer,
    api_url: "",
    host: "127.0.0.1",
    started_at: 1,
    joined_at: 1,
  };
}
function instance(id: string, nodes: NodeId[]): Instance {
  return {
    instance_id: id as InstanceId,
    model_id: model,
    sharding: "Pipeline",
    created_at: 1,
    assignments: nodes.map((n, rank) => ({
      node_id: n,
      peer_key: n,
      rank,
      layers: 2,
      weight_bytes: 1,
      required_bytes: 2,
    })),
  };
}

function run(events: ControlEvent[]): ControlState {
  let s = emptyState();
  events.forEach((event, i) => {
    const ev: IndexedEvent = { index: i + 1, session_id: S, at: i, event };
    s = apply(s, ev);
  });
  return s;
}

const start: ControlEvent = {
  type: "SessionStarted",
  session: {
    session_id: S,
    master_node_id: n1,
    master_peer_key: "p1",
    master_started_at: 1,
    started_at: 1,
  },
  members: [member(n1, "p1")],
  models: [],
  instances: [],
  runners: [],
  deployments: [],
  intent_restored: true,
};

/** Deployment d-1, Placed on instance i-a: the deployment tests below start from it. */
const deployment = {
  deployment_id: "d-1",
  model_id: model,
  min_nodes: 1,
  sharding: "Pipeline" as const,
  excluded_peer_keys: [],
  created_at: 1,
  instance_id: "i-a" as InstanceId,
  status: "Placed" as const,
};

describe("apply", () => {
  it("a session start resets to the carried snapshot", () => {
    const s = run([start, { type: "NodeJoined", member: member(n2, "p2") }]);
    expect(Object.keys(s.members).sort()).toEqual([n1, n2]);
    expect(s.index).toBe(2);
  });

  it("a hand-off names the new master and keeps the session, its start and its members", () => {
    const s = run([
      start,
      { type: "NodeJoined", member: member(n2, "p2") },
      { type: "MasterHandedOff", master_node_id: n2, master_peer_key: "p2", master_started_at: 1 },
    ]);
    expect(s.session).toEqual({
      session_id: S,
      master_node_id: n2,
      master_peer_key: "p2",
      master_started_at: 1,
      started_at: 1,
    });
    expect(Object.keys(s.members).sort()).toEqual([n1, n2]);
    expect(s.index).toBe(3);
  });

  it("rejects gaps and events from another session", () => {
    const s = run([start]);
    expect(() =>
      apply(s, {
        index: 3,
        session_id: S,
        at: 0,
        event: { type: "TaskFailed", task_id: "t" as TaskId, reason: "x" },
      }),
    ).toThrow(OutOfOrderEvent);
    expect(() =>
      apply(s, {
        index: 2,
        session_id: "s0" as SessionId,
        at: 0,
        event: { type: "TaskFailed", task_id: "t" as TaskId, reason: "x" },
      }),
    ).toThrow(OutOfOrderEvent);
  });

  it("a leaving node takes its instances and their runners with it, and nothing else", () => {
    const s = run([
      start,
      { type: "NodeJoined", member: member(n2, "p2") },
      { type: "InstancePlaced", instance: instance("i-both", [n1, n2]) },
      { type: "InstancePlaced", instance: instance("i-one", [n1]) },
      {
        type: "RunnerStatus",
        runner: {
          instance_id: "i-both" as InstanceId,
          node_id: n2,
          rank: 1,
          state: "RunnerReady",
          restarts: 0,
          since: 1,
        },
      },
      { type: "NodeLeft", node_id: n2, reason: "heartbeat lost" },
    ]);
    expect(Object.keys(s.instances)).toEqual(["i-one"]);
    expect(s.runners).toEqual({});
    expect(Object.keys(s.members)).toEqual([n1]);
  });

  it("ignores runner reports for unknown instances", () => {
    const s = run([
      start,
      {
        type: "RunnerStatus",
        runner: {
          instance_id: "ghost" as InstanceId,
          node_id: n1,
          rank: 0,
          state: "RunnerReady",
          restarts: 0,
          since: 1,
        },
      },
    ]);
    expect(s.runners).toEqual({});
  });

  it("a deregistered model leaves the registry; the others stay", () => {
    const rec = { ...registered, model_id: model };
    const kept = { ...registered, model_id: "org/kept" as ModelId };
    const s = run([
      start,
      { type: "ModelRegistered", model: rec },
      { type: "ModelRegistered", model: kept },
      { type: "ModelDeregistered", model_id: model },
    ]);
    expect(Object.keys(s.models)).toEqual(["org/kept"]);
  });

  it("TaskFailed and DownloadFailed are notifications: they move the index and change nothing else", () => {
    const before = run([start]);
    const after = run([
      start,
      { type: "TaskFailed", task_id: "t1" as TaskId, reason: "x" },
      { type: "DownloadFailed", node_id: n1, model_id: model, reason: "disk" },
    ]);
    expect(after).toEqual({ ...before, index: before.index + 2 });
  });

  it("deployments: created with the instance, pending when refused, placed again, deleted, carried", () => {
    const d = deployment;
    const refusal = { code: "insufficient_memory", message: "node x cannot fit its share" };
    const created = run([
      start,
      { type: "InstancePlaced", instance: instance("i-a", [n1]) },
      { type: "DeploymentCreated", deployment: d },
      { type: "NodeLeft", node_id: n1, reason: "heartbeat timeout" },
      { type: "DeploymentPending", deployment_id: "d-1", refusal, reason: "instance lost" },
    ]);
    expect(created.instances).toEqual({});
    expect(created.deployments["d-1"]).toMatchObject({ status: "Pending", refusal });
    const again = apply(created, {
      index: created.index + 1,
      session_id: S,
      at: 9,
      event: {
        type: "InstancePlaced",
        instance: instance("i-b", [n2]),
        deployment_id: "d-1",
        reason: "lost",
      },
    });
    expect(again.deployments["d-1"]).toEqual({ ...d, instance_id: "i-b" });
    const gone = apply(again, {
      index: again.index + 1,
      session_id: S,
      at: 10,
      event: { type: "DeploymentDeleted", deployment_id: "d-1", reason: "deleted" },
    });
    expect(gone.deployments).toEqual({});
    const carried = apply(again, {
      index: 1,
      session_id: "s-2" as SessionId,
      at: 11,
      event: { ...start, deployments: Object.values(again.deployments) } as ControlEvent,
    });
    expect(Object.keys(carried.deployments)).toEqual(["d-1"]);
  });

  it("a deployment failing, failed, and retried when its model is registered anew", () => {
    const d = deployment;
    const failure = {
      peer_key: "p1",
      node_name: "node-1",
      instance_id: "i-a" as InstanceId,
      error: "missing tensor",
      at: 2,
    };
    const failing = run([
      start,
      { type: "DeploymentCreated", deployment: d },
      { type: "DeploymentFailing", deployment_id: "d-1", failure },
    ]);
    expect(failing.deployments["d-1"]).toMatchObject({ status: "Failing", failures: [failure] });
    const failed = run([
      start,
      { type: "DeploymentCreated", deployment: d },
      { type: "DeploymentFailing", deployment_id: "d-1", failure },
      { type: "DeploymentFailed", deployment_id: "d-1", reason: "failed everywhere" },
    ]);
    expect(failed.deployments["d-1"]).toMatchObject({
      status: "Failed",
      refusal: { code: "load_failed", message: "failed everywhere" },
    });
    const retried = run([
      start,
      { type: "DeploymentCreated", deployment: d },
      { type: "DeploymentFailed", deployment_id: "d-1", reason: "failed everywhere" },
      { type: "ModelRegistered", model: { ...registered, model_id: model } },
    ]);
    expect(retried.deployments["d-1"]).toMatchObject({ status: "Pending" });
    expect(retried.deployments["d-1"]!.failures).toBeUndefined();
  });

  it("a replica retiring, recalled, and retiring again; an unknown deployment changes nothing", () => {
    const d = deployment;
    const created = { type: "DeploymentCreated", deployment: d } as const;
    const retire = (since: number) =>
      ({ type: "DeploymentRetiring", deployment_id: "d-1", since, reason: "quiet" }) as const;
    const recall = { type: "DeploymentRecalled", deployment_id: "d-1", reason: "busy" } as const;
    expect(run([start, created, retire(5)]).deployments["d-1"]).toEqual({
      ...d,
      retiring_since: 5,
    });
    expect(run([start, created, retire(5), recall]).deployments["d-1"]).toEqual(d);
    expect(run([start, created, retire(5), recall, retire(9)]).deployments["d-1"]).toEqual({
      ...d,
      retiring_since: 9,
    });
    expect(
      run([start, created, { ...retire(5), deployment_id: "d-x" }]).deployments["d-1"],
    ).toEqual(d);
  });
});
