// Table tests of the intent rules: which events become store writes, and how a replica is brought
// back to the stored intent after a restart.
import { describe, expect, it } from "vitest";
import type { ControlEvent, DeploymentIntent, Instance, InstanceId, ModelId } from "@ic/protocol";
import { amendWrites, intentWrites, RESTORED, restoreIntent } from "./intent.ts";
import { model, replicaWith } from "./test-support.ts";

const intent = (id: string, over: Partial<DeploymentIntent> = {}): DeploymentIntent => ({
  deployment_id: id,
  model_id: model.model_id,
  min_nodes: 1,
  sharding: "Pipeline",
  excluded_peer_keys: [],
  created_at: 1,
  ...over,
});

describe("intentWrites", () => {
  it("records deployments and models, and nothing that is only runtime", () => {
    const events: ControlEvent[] = [
      {
        type: "DeploymentCreated",
        deployment: { ...intent("d-1"), instance_id: "i-1" as InstanceId, status: "Placed" },
      },
      { type: "DeploymentPending", deployment_id: "d-1", refusal: RESTORED, reason: "x" },
      { type: "ModelRegistered", model },
      { type: "DeploymentDeleted", deployment_id: "d-1", reason: "x" },
      { type: "ModelDeregistered", model_id: model.model_id },
      { type: "InstanceDeleted", instance_id: "i-1" as InstanceId, reason: "x" },
    ];
    expect(intentWrites(events)).toEqual([
      { op: "put_deployment", deployment: intent("d-1") },
      { op: "put_model", model },
      { op: "delete_deployment", deployment_id: "d-1" },
      { op: "delete_model", model_id: model.model_id },
    ]);
  });
});

describe("intentWrites: what a deployment is comes back with it", () => {
  it("keeps its kind, replica set and on-demand policy, not its runtime status", () => {
    const kept = {
      kind: "embed" as const,
      replica_set: "rs-1",
      on_demand: true as const,
      keep_alive_ms: 60_000,
    };
    const [w] = intentWrites([
      {
        type: "DeploymentCreated",
        deployment: {
          ...intent("d-1", kept),
          instance_id: "i-1" as InstanceId,
          status: "Placed",
        },
      },
    ]);
    expect(w).toEqual({ op: "put_deployment", deployment: intent("d-1", kept) });
  });
});

describe("restoreIntent", () => {
  const ids = (d: string) => `i-restored-${d}` as InstanceId;

  it("a full restart: every stored deployment comes back Pending, every stored model registered", () => {
    // A fresh process: its replica holds the members and models (the store host registered)
    // only, no deployment.
    const s = replicaWith(["a"]);
    const stored = { ...model, model_id: "org/stored" as ModelId };
    const r = restoreIntent(
      s,
      { deployments: [intent("d-1"), intent("d-2")], models: [model, stored], initialized: true },
      ids,
    );
    expect(r.writes).toEqual([]);
    expect(r.events).toEqual([
      {
        type: "DeploymentCreated",
        deployment: {
          ...intent("d-1"),
          instance_id: "i-restored-d-1",
          status: "Pending",
          refusal: RESTORED,
        },
      },
      {
        type: "DeploymentCreated",
        deployment: {
          ...intent("d-2"),
          instance_id: "i-restored-d-2",
          status: "Pending",
          refusal: RESTORED,
        },
      },
      { type: "ModelRegistered", model: stored },
    ]);
  });

  it("an initialized store is authoritative: a deployment only the replica holds goes, with its instance", () => {
    const s = replicaWith(["a"]);
    s.models[model.model_id] = model;
    const inst: Instance = {
      instance_id: "i-1" as InstanceId,
      model_id: model.model_id,
      sharding: "Pipeline",
      created_at: 0,
      assignments: [],
    } as unknown as Instance;
    s.instances["i-1"] = inst;
    s.deployments["d-old"] = {
      ...intent("d-old"),
      instance_id: "i-1" as InstanceId,
      status: "Placed",
    };
    s.deployments["d-kept"] = {
      ...intent("d-kept"),
      instance_id: "i-9" as InstanceId,
      status: "Placed",
    };
    const r = restoreIntent(
      s,
      { deployments: [intent("d-kept")], models: [model], initialized: true },
      ids,
    );
    expect(r.events.map((e) => e.type)).toEqual(["DeploymentDeleted", "InstanceDeleted"]);
    expect(r.writes).toEqual([]);
  });

  it("a store never written (an older cluster) receives the replica's intent; nothing is deleted", () => {
    const s = replicaWith(["a"]);
    const other = { ...model, model_id: "org/other" as ModelId };
    s.models[other.model_id] = other;
    s.deployments["d-1"] = { ...intent("d-1"), instance_id: "i-1" as InstanceId, status: "Placed" };
    const r = restoreIntent(s, { deployments: [], models: [], initialized: false }, ids);
    expect(r.events).toEqual([]);
    expect(r.writes).toEqual([
      { op: "put_deployment", deployment: intent("d-1") },
      ...Object.values(s.models).map((m) => ({ op: "put_model", model: m })),
    ]);
    expect(r.writes).toContainEqual({ op: "put_model", model: other });
  });
});

describe("amendWrites", () => {
  const put = (id: string, over: Partial<DeploymentIntent> = {}) => ({
    op: "put_deployment" as const,
    deployment: intent(id, over),
  });
  it.each([
    {
      name: "the same decision: nothing to amend",
      done: [put("d-1")],
      wanted: [put("d-1")],
      fix: [],
    },
    {
      name: "refused after the write: the put is undone",
      done: [put("d-1")],
      wanted: [],
      fix: [{ op: "delete_deployment", deployment_id: "d-1" }],
    },
    {
      name: "decided again with other exclusions: written again as decided",
      done: [put("d-1")],
      wanted: [put("d-1", { excluded_peer_keys: ["p-b"] })],
      fix: [put("d-1", { excluded_peer_keys: ["p-b"] })],
    },
    {
      name: "a delete is never undone (the client retries it anyway)",
      done: [{ op: "delete_deployment" as const, deployment_id: "d-1" }],
      wanted: [],
      fix: [],
    },
  ])("$name", ({ done, wanted, fix }) => {
    expect(amendWrites(done, wanted)).toEqual(fix);
  });
});
