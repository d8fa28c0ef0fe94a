import { describe, expect, it } from "vitest";
import { emptyState, runnerKey } from "@ic/protocol";
import type {
  ControlState,
  Deployment,
  Instance,
  InstanceId,
  ModelId,
  NodeId,
  Runner,
} from "@ic/protocol";
import { notServableError, readiness, readyInstances, readyModels } from "./readiness.ts";

const M = "demo/tiny-llama" as ModelId;
const n1 = "n-1" as NodeId;
const n2 = "n-2" as NodeId;
const NOW = 100_000;

function inst(id: string, nodes: NodeId[], created = 1, model: ModelId = M): Instance {
  return {
    instance_id: id as InstanceId,
    model_id: model,
    sharding: "Pipeline",
    created_at: created,
    assignments: nodes.map((n, rank) => ({
      node_id: n,
      peer_key: `p-${n}`,
      rank,
      weight_bytes: 1,
      required_bytes: 1,
    })),
  };
}

function runner(id: string, rank: number, node: NodeId, r: Partial<Runner>): Runner {
  return {
    instance_id: id as InstanceId,
    node_id: node,
    rank,
    state: "RunnerWarmingUp",
    restarts: 0,
    since: NOW - 5000,
    ...r,
  };
}

function state(
  instances: Instance[],
  runners: Runner[],
  extra: Partial<ControlState> = {},
): ControlState {
  const s = emptyState();
  for (const [id, name] of [
    [n1, "node-1"],
    [n2, "node-2"],
  ] as const) {
    s.members[id] = {
      node_id: id,
      peer_key: `p-${id}`,
      name,
      api_url: "",
      host: "",
      started_at: 0,
      joined_at: 0,
    };
  }
  for (const i of instances) s.instances[i.instance_id] = i;
  for (const r of runners) s.runners[runnerKey(r.instance_id, r.rank)] = r;
  return Object.assign(s, extra);
}

/** A deployment of `model` whose instance `instanceId` (possibly gone) realizes it. */
function deployment(id: string, model: ModelId = M, instanceId = "i-gone"): Deployment {
  return {
    deployment_id: id,
    model_id: model,
    min_nodes: 1,
    sharding: "Pipeline",
    excluded_peer_keys: [],
    created_at: 0,
    instance_id: instanceId as InstanceId,
    status: "Placed",
  };
}

const i1 = inst("i-a", [n2]);
const staging = (done: number, total: number, startedAgo: number) =>
  runner("i-a", 0, n2, {
    state: "RunnerStaging",
    progress: { staged_bytes: done, total_bytes: total, started_at: NOW - startedAgo },
  });

describe("readiness", () => {
  const notReady: {
    name: string;
    s: ControlState;
    message: string;
    retryAfterS: number | undefined;
    retryable: boolean;
    phase: string;
  }[] = [
    {
      name: "placed, no runner reported yet",
      s: state([i1], []),
      message: "demo/tiny-llama is starting on node-2; retry",
      retryAfterS: 2,
      retryable: true,
      phase: "pending",
    },
    {
      name: "staging without progress",
      s: state([i1], [runner("i-a", 0, n2, { state: "RunnerStaging" })]),
      message: "demo/tiny-llama is staging on node-2; retry",
      retryAfterS: 5,
      retryable: true,
      phase: "staging",
    },
    {
      name: "staging 40% of 1.2 GB after 8 s: 12 s left plus warmup",
      s: state([i1], [staging(480e6, 1.2e9, 8000)]),
      message: "demo/tiny-llama is staging on node-2 (40% of 1.2 GB); retry",
      retryAfterS: 14,
      retryable: true,
      phase: "staging",
    },
    {
      name: "staging just started (no rate yet)",
      s: state([i1], [staging(0, 1.2e9, 0)]),
      message: "demo/tiny-llama is staging on node-2 (1.2 GB); retry",
      retryAfterS: 5,
      retryable: true,
      phase: "staging",
    },
    {
      name: "slow staging is capped at 60 s",
      s: state([i1], [staging(1e6, 1.2e9, 10_000)]),
      message: "demo/tiny-llama is staging on node-2 (0% of 1.2 GB); retry",
      retryAfterS: 60,
      retryable: true,
      phase: "staging",
    },
    {
      name: "warming up for 12 s",
      s: state([i1], [runner("i-a", 0, n2, { warmup_started_at: NOW - 12_000 })]),
      message: "demo/tiny-llama is warming up on node-2 (12 s); retry",
      retryAfterS: 2,
      retryable: true,
      phase: "warming_up",
    },
    {
      name: "warming up without a start time uses since",
      s: state([i1], [runner("i-a", 0, n2, {})]),
      message: "demo/tiny-llama is warming up on node-2 (5 s); retry",
      retryAfterS: 2,
      retryable: true,
      phase: "warming_up",
    },
    {
      name: "restarting after a crash",
      s: state([i1], [runner("i-a", 0, n2, { restarts: 2, reason: "restarting after crashed" })]),
      message: "demo/tiny-llama is restarting after a crash on node-2 (restart 2); retry",
      retryAfterS: 5,
      retryable: true,
      phase: "restarting",
    },
    {
      name: "rank 0 waiting for a remote rank",
      s: state(
        [inst("i-a", [n1, n2])],
        [
          runner("i-a", 0, n1, { reason: "waiting for remote ranks" }),
          runner("i-a", 1, n2, { state: "RunnerWarmingUp" }),
        ],
      ),
      message:
        "demo/tiny-llama is waiting on node-1 for remote ranks (rank 1 on node-2: RunnerWarmingUp); retry",
      retryAfterS: 3,
      retryable: true,
      phase: "waiting_for_ranks",
    },
    {
      name: "failed, no deployment: retrying will not help",
      s: state([i1], [runner("i-a", 0, n2, { state: "RunnerFailed", reason: "bad gguf" })]),
      message:
        "demo/tiny-llama has failed on node-2 (bad gguf); delete the instance (DELETE /instance/{id}) and place it again",
      retryAfterS: undefined,
      retryable: false,
      phase: "failed",
    },
    {
      name: "failed, but a deployment will re-place it",
      s: state([i1], [runner("i-a", 0, n2, { state: "RunnerFailed" })], {
        deployments: { d1: deployment("d1", M, "i-a") },
      }),
      message: "demo/tiny-llama has failed on node-2; retry",
      retryAfterS: 10,
      retryable: true,
      phase: "failed",
    },
    {
      name: "deployed, no instance yet",
      s: state([], [], { deployments: { d1: { ...deployment("d1"), status: "Pending" } } }),
      message: "demo/tiny-llama is deployed but has no instance yet (placement pending); retry",
      retryAfterS: 5,
      retryable: true,
      phase: "placing",
    },
    {
      name: "two instances: the one closest to serving tells the story",
      s: state(
        [inst("i-a", [n1], 1), inst("i-b", [n2], 2)],
        [
          runner("i-a", 0, n1, { state: "RunnerStaging" }),
          runner("i-b", 0, n2, { warmup_started_at: NOW - 1000 }),
        ],
      ),
      message: "demo/tiny-llama is warming up on node-2 (1 s) (2 instances, none ready); retry",
      retryAfterS: 2,
      retryable: true,
      phase: "warming_up",
    },
  ];
  for (const t of notReady) {
    it(`${t.name}: 404 model_not_ready`, () => {
      const r = readiness(t.s, M, NOW);
      expect(r.kind).toBe("not_ready");
      if (r.kind !== "not_ready") return;
      expect(r.message).toBe(t.message);
      expect(r.retryAfterS).toBe(t.retryAfterS);
      expect(r.retryable).toBe(t.retryable);
      expect(r.details["phase"]).toBe(t.phase);
      const e = notServableError(M, r);
      expect(e.code).toBe("model_not_ready");
      expect(e.retryable).toBe(t.retryable);
      expect(e.retryAfterS).toBe(t.retryAfterS);
    });
  }

  it("no instance and no deployment: model_not_found, not retryable", () => {
    const s = state([inst("i-x", [n1], 1, "other/model" as ModelId)], [], {
      deployments: { d: deployment("d", "other/model" as ModelId) },
    });
    const r = readiness(s, M, NOW);
    expect(r).toEqual({ kind: "absent" });
    if (r.kind !== "absent") return;
    const e = notServableError(M, r);
    expect(e.code).toBe("model_not_found");
    expect(e.retryable).toBe(false);
    expect(e.retryAfterS).toBeUndefined();
    expect(e.message).toMatch(/place it first/);
  });

  it("a deployment that failed everywhere: model_not_ready, not retryable, with the engine's words", () => {
    const failed: Deployment = {
      ...deployment("d"),
      status: "Failed",
      refusal: {
        code: "load_failed",
        message:
          "org/m failed to run on every node it was tried on: node-1 (llama_model_load: error loading model: missing tensor 'token_embd.weight')",
      },
    };
    const r = readiness(state([], [], { deployments: { d: failed } }), M, NOW);
    if (r.kind === "ready") throw new Error("ready");
    const e = notServableError(M, r);
    expect(e.code).toBe("model_not_ready");
    expect(e.retryable).toBe(false);
    expect(e.retryAfterS).toBeUndefined();
    expect(e.message).toMatch(/missing tensor 'token_embd.weight'/);
  });

  it("a deployment being moved after a failure: retryable, saying where it failed and why", () => {
    const failing: Deployment = {
      ...deployment("d"),
      status: "Failing",
      failures: [
        {
          peer_key: "p-1",
          node_name: "node-1",
          instance_id: "i-x" as InstanceId,
          error: "out of memory",
          at: 1,
        },
      ],
    };
    const r = readiness(state([], [], { deployments: { d: failing } }), M, NOW);
    if (r.kind === "ready") throw new Error("ready");
    expect(r).toMatchObject({ retryable: true, retryAfterS: 10 });
    expect(notServableError(M, r).message).toMatch(
      /failed to run on node-1 \(out of memory\); it is being placed on another node/,
    );
  });

  it("an unknown model while the session's intent is not restored yet: model_not_ready, retryable", () => {
    const s = { ...state([], []), intent_restored: false };
    const r = readiness(s, M, NOW);
    expect(r).toMatchObject({ kind: "not_ready", retryable: true, retryAfterS: 2 });
    if (r.kind === "ready") return;
    const e = notServableError(M, r);
    expect(e.code).toBe("model_not_ready");
    expect(e.message).toMatch(/restoring its deployments after a restart/);
  });

  it("ready: every instance with a ready rank 0 and an endpoint, oldest first", () => {
    const s = state(
      [inst("i-b", [n2], 2), inst("i-a", [n1], 1), inst("i-c", [n1], 3)],
      [
        runner("i-a", 0, n1, { state: "RunnerReady", endpoint: "http://a" }),
        runner("i-b", 0, n2, { state: "RunnerReady", endpoint: "http://b" }),
        runner("i-c", 0, n1, { state: "RunnerReady" }),
      ],
    );
    const r = readiness(s, M, NOW);
    expect(r.kind).toBe("ready");
    if (r.kind !== "ready") return;
    expect(r.instances.map((x) => x.endpoint)).toEqual(["http://a", "http://b"]);
  });

  it("ready: an instance whose deployment retires is marked so (routing avoids it)", () => {
    const s = state(
      [inst("i-a", [n1], 1), inst("i-b", [n2], 2)],
      [
        runner("i-a", 0, n1, { state: "RunnerReady", endpoint: "http://a" }),
        runner("i-b", 0, n2, { state: "RunnerReady", endpoint: "http://b" }),
      ],
      {
        deployments: {
          d1: deployment("d1", M, "i-a"),
          d2: { ...deployment("d2", M, "i-b"), retiring_since: 5 },
        },
      },
    );
    expect(readyInstances(s, M).map((x) => [x.endpoint, x.retiring])).toEqual([
      ["http://a", undefined],
      ["http://b", true],
    ]);
  });

  it("/v1/models lists only models with a ready instance", () => {
    const other = "org/other" as ModelId;
    const s = state(
      [inst("i-a", [n1]), inst("i-o", [n2], 1, other)],
      [
        runner("i-a", 0, n1, { state: "RunnerWarmingUp" }),
        runner("i-o", 0, n2, { state: "RunnerReady", endpoint: "http://o" }),
      ],
    );
    expect(readyModels(s)).toEqual([other]);
    expect(readyInstances(s, M)).toEqual([]);
  });
});
