import { describe, expect, it } from "vitest";
import { emptyState, runnerKey } from "@ic/protocol";
import type {
  ControlState,
  Instance,
  InstanceId,
  ModelId,
  NodeId,
  RunnerState,
} from "@ic/protocol";
import { planRunners, remoteEndpoints } from "./plan.ts";
import type { SlotView } from "./plan.ts";

const ME = "p-me";

/** An instance with rank r on the peer named at index r. */
function instance(id: string, peers: readonly string[]): Instance {
  return {
    instance_id: id as InstanceId,
    model_id: "m/x" as ModelId,
    sharding: "Pipeline",
    created_at: 1,
    assignments: peers.map((peer_key, rank) => ({
      node_id: `n-${peer_key}` as NodeId,
      peer_key,
      rank,
      weight_bytes: 1,
      required_bytes: 1,
    })),
  };
}

function stateWith(
  instances: readonly Instance[],
  runners: readonly { inst: Instance; rank: number; state: RunnerState; endpoint?: string }[] = [],
): ControlState {
  const s = emptyState();
  for (const i of instances) s.instances[i.instance_id] = i;
  for (const r of runners)
    s.runners[runnerKey(r.inst.instance_id, r.rank)] = {
      instance_id: r.inst.instance_id,
      node_id: "n-x" as NodeId,
      rank: r.rank,
      state: r.state,
      restarts: 0,
      since: 1,
      ...(r.endpoint ? { endpoint: r.endpoint } : {}),
    };
  return s;
}

const slot = (inst: Instance, rank: number, o: Partial<SlotView> = {}): [string, SlotView] => [
  runnerKey(inst.instance_id, rank),
  { instance: inst, rank, supervised: true, state: "RunnerReady", rpc: undefined, ...o },
];

const single = instance("i-single", [ME]);
const pair = instance("i-pair", [ME, "p-other"]);
const remoteOnly = instance("i-remote", ["p-other", ME]);
const pairKey = runnerKey(pair.instance_id, 0);

describe("planRunners", () => {
  it.each<[string, ControlState, [string, SlotView][], unknown[]]>([
    ["nothing assigned, nothing running", stateWith([]), [], []],
    [
      "a new assignment is created, at its rank",
      stateWith([single, remoteOnly]),
      [],
      [
        { kind: "create", key: runnerKey(single.instance_id, 0), instance: single, rank: 0 },
        {
          kind: "create",
          key: runnerKey(remoteOnly.instance_id, 1),
          instance: remoteOnly,
          rank: 1,
        },
      ],
    ],
    [
      "a runner whose instance is gone is torn down, before anything is created",
      stateWith([single]),
      [slot(pair, 0)],
      [
        { kind: "teardown", key: pairKey },
        { kind: "create", key: runnerKey(single.instance_id, 0), instance: single, rank: 0 },
      ],
    ],
    ["a running single-node runner is left alone", stateWith([single]), [slot(single, 0)], []],
    [
      "rank 0 stops while a remote rank is not ready",
      stateWith([pair], [{ inst: pair, rank: 1, state: "RunnerWarmingUp" }]),
      [slot(pair, 0, { rpc: "10.0.0.2:50052" })],
      [{ kind: "await-remote", key: pairKey }],
    ],
    [
      "rank 0 reconnects when its remote rank came back elsewhere",
      stateWith(
        [pair],
        [{ inst: pair, rank: 1, state: "RunnerReady", endpoint: "10.0.0.2:50099" }],
      ),
      [slot(pair, 0, { rpc: "10.0.0.2:50052" })],
      [{ kind: "reconnect", key: pairKey, rpc: ["10.0.0.2:50099"] }],
    ],
    [
      "rank 0 on the same remote endpoints is left alone",
      stateWith(
        [pair],
        [{ inst: pair, rank: 1, state: "RunnerReady", endpoint: "10.0.0.2:50052" }],
      ),
      [slot(pair, 0, { rpc: "10.0.0.2:50052" })],
      [],
    ],
    [
      "rank 0 waiting for its remote ranks is launched again",
      stateWith(
        [pair],
        [{ inst: pair, rank: 1, state: "RunnerReady", endpoint: "10.0.0.2:50052" }],
      ),
      [slot(pair, 0, { supervised: false, state: "RunnerWarmingUp" })],
      [{ kind: "relaunch", key: pairKey }],
    ],
    [
      "a stopped rank 0 that is still staging is not launched twice",
      stateWith([pair]),
      [slot(pair, 0, { supervised: false, state: "RunnerStaging" })],
      [],
    ],
  ])("%s", (_what, state, slots, want) =>
    expect(planRunners(state, ME, new Map(slots))).toEqual(want),
  );
});

describe("remoteEndpoints", () => {
  it("lists ranks 1..n-1 in order once all are ready, and nothing before", () => {
    const three = instance("i-3", [ME, "p-b", "p-c"]);
    const ready = (rank: number, endpoint: string) =>
      ({ inst: three, rank, state: "RunnerReady", endpoint }) as const;
    expect(remoteEndpoints(stateWith([three], [ready(1, "b:1"), ready(2, "c:1")]), three)).toEqual([
      "b:1",
      "c:1",
    ]);
    expect(remoteEndpoints(stateWith([three], [ready(1, "b:1")]), three)).toBeUndefined();
    expect(remoteEndpoints(stateWith([single]), single)).toEqual([]);
  });
});
