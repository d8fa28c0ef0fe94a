// Table tests of reconcile: a deployment whose instance is lost is placed again on what is there,
// honouring its exclusions by peer key and earlier re-placements, or kept Pending with its refusal.
import { describe, expect, it } from "vitest";
import { runnerKey } from "@ic/protocol";
import type { ControlState, Deployment, DeploymentFailure, InstanceId, NodeId } from "@ic/protocol";
import type { NodeReport } from "@ic/placement";
import { failingInstances, lostDeployments, reconcile } from "./reconcile.ts";
import { BARE, G, instanceOn, model, replicaWith, report } from "./test-support.ts";

function world(nodes: { id: string; gb: number; usable?: boolean }[], deployments: Deployment[]) {
  const state: ControlState = replicaWith(nodes.map((n) => n.id));
  for (const d of deployments) state.deployments[d.deployment_id] = d;
  const reports: NodeReport[] = nodes.map((n) =>
    report(n.id, n.gb, {
      usable: n.usable ?? true,
      links: nodes.filter((o) => o.id !== n.id).map((o) => o.id),
    }),
  );
  return { state, reports };
}

const dep = (id: string, over: Partial<Deployment> = {}): Deployment => ({
  deployment_id: id,
  model_id: model.model_id,
  min_nodes: 1,
  sharding: "Pipeline",
  excluded_peer_keys: [],
  created_at: Number(id.replace(/\D/g, "")) || 0,
  instance_id: `i-old-${id}` as InstanceId,
  status: "Placed",
  ...over,
});

let n = 0;
const opts = (over = {}) => ({
  now: 5,
  newInstanceId: () => `i-new-${++n}` as InstanceId,
  memory: BARE,
  ...over,
});

describe("reconcile", () => {
  it("does nothing while every deployment's instance is there", () => {
    const { state, reports } = world([{ id: "a", gb: 10 }], [dep("d1")]);
    state.instances["i-old-d1"] = {
      instance_id: "i-old-d1" as InstanceId,
      model_id: model.model_id,
      sharding: "Pipeline",
      created_at: 0,
      assignments: [
        {
          node_id: "n-a" as NodeId,
          peer_key: "p-a",
          rank: 0,
          layers: 10,
          weight_bytes: 6 * G,
          required_bytes: 6 * G,
        },
      ],
    };
    expect(lostDeployments(state)).toEqual([]);
    expect(reconcile(state, reports, opts())).toEqual([]);
  });

  it.each([
    {
      name: "a lost instance is placed again on a survivor",
      nodes: [{ id: "b", gb: 10 }],
      deps: [dep("d1")],
      want: ["place d1 n-b"],
    },
    {
      name: "exclusions by peer key still hold",
      nodes: [
        { id: "b", gb: 20 },
        { id: "c", gb: 10 },
      ],
      deps: [dep("d1", { excluded_peer_keys: ["p-b"] })],
      want: ["place d1 n-c"],
    },
    {
      name: "two lost deployments do not take the same memory",
      nodes: [
        { id: "b", gb: 10 },
        { id: "c", gb: 10 },
      ],
      deps: [dep("d1"), dep("d2")],
      want: ["place d1 n-b", "place d2 n-c"],
    },
    {
      name: "two lost replicas of a set land on distinct nodes, even where one node has room for both",
      nodes: [
        { id: "b", gb: 30 },
        { id: "c", gb: 10 },
      ],
      deps: [dep("d1", { replica_set: "rs-1" }), dep("d2", { replica_set: "rs-1" })],
      want: ["place d1 n-b", "place d2 n-c"],
    },
    {
      name: "replicas of another set, or no set, share nodes as before",
      nodes: [
        { id: "b", gb: 30 },
        { id: "c", gb: 10 },
      ],
      deps: [dep("d1", { replica_set: "rs-1" }), dep("d2", { replica_set: "rs-2" })],
      want: ["place d1 n-b", "place d2 n-b"],
    },
    {
      name: "no room: pending with the typed refusal",
      nodes: [{ id: "b", gb: 4 }],
      deps: [dep("d1")],
      want: ["pending d1 insufficient_memory"],
    },
    {
      name: "only an unhealthy node: pending with node_unhealthy",
      nodes: [{ id: "b", gb: 10, usable: false }],
      deps: [dep("d1")],
      want: ["pending d1 node_unhealthy"],
    },
  ])("$name", ({ nodes, deps, want }) => {
    const { state, reports } = world(nodes, deps);
    const got = reconcile(state, reports, opts()).map((a) =>
      a.kind === "place"
        ? `place ${a.deployment_id} ${a.instance.assignments.map((x) => x.node_id).join(",")}`
        : a.kind === "pending"
          ? `pending ${a.deployment_id} ${a.refusal.code}`
          : `fail ${a.deployment_id}`,
    );
    expect(got).toEqual(want);
  });

  it("a lost replica avoids the nodes its live siblings hold; with none left it is pending", () => {
    const sibling = (node: string) => instanceOn("i-sib", node);
    const deps = [
      dep("d1", { replica_set: "rs-1" }),
      dep("d2", { replica_set: "rs-1", instance_id: "i-sib" as InstanceId }),
    ];
    const two = world(
      [
        { id: "b", gb: 40 },
        { id: "c", gb: 10 },
      ],
      deps,
    );
    two.state.instances["i-sib"] = sibling("b");
    const [a] = reconcile(two.state, two.reports, opts());
    expect(a?.kind === "place" && a.instance.assignments.map((x) => x.node_id)).toEqual(["n-c"]);
    const one = world([{ id: "b", gb: 40 }], deps);
    one.state.instances["i-sib"] = sibling("b");
    const [p] = reconcile(one.state, one.reports, opts());
    expect(p).toMatchObject({ kind: "pending", refusal: { code: "all_excluded" } });
  });

  it("a pending deployment with the same refusal gives no new event; not due gives nothing", () => {
    const { state, reports } = world([{ id: "b", gb: 4 }], [dep("d1")]);
    const [first] = reconcile(state, reports, opts());
    expect(first?.kind).toBe("pending");
    if (first?.kind !== "pending") return;
    state.deployments.d1 = { ...state.deployments.d1!, status: "Pending", refusal: first.refusal };
    expect(reconcile(state, reports, opts())).toEqual([]);
    expect(reconcile(state, reports, opts({ due: () => false }))).toEqual([]);
  });

  it("a deployment on a draining node is placed elsewhere first, away from its siblings; with no room it stays", () => {
    /** d1 on a, its sibling d2 on b, c free with `cGb`; `drains` says draining. */
    const replicas = (cGb: number, drains: string[]) => {
      const w = world(
        [
          { id: "a", gb: 40 },
          { id: "b", gb: 40 },
          { id: "c", gb: cGb },
        ],
        [
          dep("d1", { replica_set: "rs-1", instance_id: "i-1" as InstanceId }),
          dep("d2", { replica_set: "rs-1", instance_id: "i-2" as InstanceId }),
        ],
      );
      w.state.instances["i-1"] = instanceOn("i-1", "a");
      w.state.instances["i-2"] = instanceOn("i-2", "b");
      const reports = w.reports.map((r) =>
        drains.includes(r.peer_key) ? { ...r, draining: true as const } : r,
      );
      return reconcile(w.state, reports, opts());
    };
    expect(replicas(10, [])).toEqual([]);
    // a drains: d1 goes to c (b holds its sibling), and nothing else is placed on a.
    const [move, ...rest] = replicas(10, ["p-a"]);
    expect(rest).toEqual([]);
    expect(move).toMatchObject({
      kind: "place",
      deployment_id: "d1",
      reason:
        "instance i-1 of deployment d1 is on a draining node; placed elsewhere before it leaves",
    });
    expect(move?.kind === "place" && move.instance.assignments.map((x) => x.node_id)).toEqual([
      "n-c",
    ]);
    // c cannot take it: nothing (no Pending for a deployment that still serves).
    expect(replicas(4, ["p-a"])).toEqual([]);
  });

  it("a retiring replica is not placed again, lost or on a draining node", () => {
    const retiring = dep("d1", { replica_set: "rs-1", retiring_since: 3 });
    const lost = world([{ id: "b", gb: 40 }], [retiring, dep("d2")]);
    expect(reconcile(lost.state, lost.reports, opts()).map((a) => a.deployment_id)).toEqual(["d2"]);
    const w = world(
      [
        { id: "a", gb: 40 },
        { id: "c", gb: 40 },
      ],
      [{ ...retiring, instance_id: "i-1" as InstanceId }],
    );
    w.state.instances["i-1"] = instanceOn("i-1", "a");
    const draining = w.reports.map((r) =>
      r.peer_key === "p-a" ? { ...r, draining: true as const } : r,
    );
    expect(reconcile(w.state, draining, opts())).toEqual([]);
  });

  it("a lost deployment is not placed on a draining node", () => {
    const w = world(
      [
        { id: "b", gb: 40 },
        { id: "c", gb: 10 },
      ],
      [dep("d1")],
    );
    const draining = w.reports.map((r) =>
      r.peer_key === "p-b" ? { ...r, draining: true as const } : r,
    );
    const [a] = reconcile(w.state, draining, opts());
    expect(a?.kind === "place" && a.instance.assignments.map((x) => x.node_id)).toEqual(["n-c"]);
    const only = world([{ id: "b", gb: 40 }], [dep("d1")]);
    const [p] = reconcile(
      only.state,
      only.reports.map((r) => ({ ...r, draining: true as const })),
      opts(),
    );
    expect(p).toMatchObject({
      kind: "pending",
      refusal: { code: "node_unhealthy", health_code: "draining" },
    });
  });

  it("the new instance is the deployment's model, sharding and a fresh id", () => {
    const { state, reports } = world([{ id: "b", gb: 10 }], [dep("d1")]);
    const [a] = reconcile(state, reports, opts({ newInstanceId: () => "i-x" as InstanceId }));
    expect(a).toMatchObject({
      kind: "place",
      instance: { instance_id: "i-x", model_id: "org/m", sharding: "Pipeline", created_at: 5 },
      reason: "instance i-old-d1 of deployment d1 was lost",
    });
  });
});

describe("a deployment whose instance fails to run", () => {
  const failure = (node: string): DeploymentFailure => ({
    peer_key: `p-${node}`,
    node_name: `node-${node}`,
    instance_id: `i-on-${node}` as InstanceId,
    error: "llama_model_load: error loading model: missing tensor 'token_embd.weight'",
    at: 1,
  });
  const failing = (nodes: string[]) =>
    dep("d1", { status: "Failing", failures: nodes.map(failure) });

  it.each([
    {
      name: "failed on one node: placed on another, never on the one it failed on",
      nodes: ["a", "b"],
      failed: ["a"],
      want: ["place d1 n-b"],
    },
    {
      name: "failed on every node there is: given up",
      nodes: ["a", "b"],
      failed: ["a", "b"],
      want: ["fail d1"],
    },
    {
      name: "failed on three nodes: given up, even with more nodes left",
      nodes: ["a", "b", "c", "d"],
      failed: ["a", "b", "c"],
      want: ["fail d1"],
    },
  ])("$name", ({ nodes, failed, want }) => {
    const { state, reports } = world(
      nodes.map((id) => ({ id, gb: 10 })),
      [failing(failed)],
    );
    const got = reconcile(state, reports, opts()).map((a) =>
      a.kind === "place"
        ? `place ${a.deployment_id} ${a.instance.assignments.map((x) => x.node_id).join(",")}`
        : `${a.kind} ${a.deployment_id}`,
    );
    expect(got).toEqual(want);
  });

  it("the reason names every node and what its engine said", () => {
    const { state, reports } = world([{ id: "a", gb: 10 }], [failing(["a"])]);
    const [a] = reconcile(state, reports, opts());
    expect(a).toMatchObject({
      kind: "fail",
      reason: expect.stringMatching(
        /org\/m failed to run on every node it was tried on: node-a \(llama_model_load: error loading model: missing tensor 'token_embd.weight'\)/,
      ),
    });
  });

  it("a Failed deployment is left alone", () => {
    const { state, reports } = world([{ id: "a", gb: 10 }], [dep("d1", { status: "Failed" })]);
    expect(lostDeployments(state)).toEqual([]);
    expect(reconcile(state, reports, opts())).toEqual([]);
  });

  it("failingInstances: a placed instance with a rank that gave up, with the engine's last line", () => {
    const { state } = world(
      [{ id: "a", gb: 10 }],
      [dep("d1", { instance_id: "i-1" as InstanceId })],
    );
    state.instances["i-1"] = {
      instance_id: "i-1" as InstanceId,
      model_id: model.model_id,
      sharding: "Pipeline",
      created_at: 0,
      assignments: [
        {
          node_id: "n-a" as NodeId,
          peer_key: "p-a",
          rank: 0,
          layers: 10,
          weight_bytes: 1,
          required_bytes: 1,
        },
      ],
    };
    expect(failingInstances(state, 9)).toEqual([]);
    state.runners[runnerKey("i-1", 0)] = {
      instance_id: "i-1" as InstanceId,
      node_id: "n-a" as NodeId,
      rank: 0,
      state: "RunnerFailed",
      reason: "crashed 5 times in a row",
      last_error: "llama_model_load: error loading model: missing tensor 'token_embd.weight'",
      restarts: 5,
      since: 1,
    };
    expect(failingInstances(state, 9)).toEqual([
      {
        deployment_id: "d1",
        instance_id: "i-1",
        failure: {
          peer_key: "p-a",
          node_name: "node-a",
          instance_id: "i-1",
          error: "llama_model_load: error loading model: missing tensor 'token_embd.weight'",
          at: 9,
        },
      },
    ]);
  });
});
