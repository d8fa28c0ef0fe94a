// Table tests of the rule for replicas that follow load: it grows after load stayed above the
// threshold for the up window, shrinks after a quiet down window and not within one of its last
// change, never past its bounds, and decides nothing while a replica is still loading. A shrink
// retires first and removes once the retiring replica's requests have ended (or after retireMs);
// load that comes back meanwhile recalls it.
import { describe, expect, it } from "vitest";
import { runnerKey } from "@ic/protocol";
import type { ControlState, Deployment, InstanceId, NodeId } from "@ic/protocol";
import { instanceOn, replicaWith } from "./test-support.ts";
import { replicaSets, scaleSets, scaleStep } from "./scaling.ts";
import type { ScaleMemo, ScaleSet } from "./scaling.ts";

const W = { upMs: 1000, downMs: 5000, retireMs: 60_000 };
const policy = { min_replicas: 1, max_replicas: 3, up_at: 4 };

function setOf(n: number, inFlight: number, ready = n, retiring?: ScaleSet["retiring"]): ScaleSet {
  const deployments = Array.from(
    { length: n },
    (_, i) => ({ deployment_id: `d-${i}` }) as Deployment,
  );
  return { replica_set: "rs", policy, deployments, ready, inFlight, ...(retiring && { retiring }) };
}

interface Case {
  readonly name: string;
  readonly set: ScaleSet;
  readonly memo: ScaleMemo;
  readonly now: number;
  readonly want: { direction?: "up" | "down"; memo: ScaleMemo };
}

const cases: Case[] = [
  {
    name: "load above the threshold starts the up window",
    set: setOf(1, 9),
    memo: {},
    now: 100,
    want: { memo: { aboveSince: 100 } },
  },
  {
    name: "still above within the window: waits",
    set: setOf(1, 9),
    memo: { aboveSince: 100 },
    now: 1099,
    want: { memo: { aboveSince: 100 } },
  },
  {
    name: "above for the whole window: one more",
    set: setOf(1, 9),
    memo: { aboveSince: 100 },
    now: 1100,
    want: { direction: "up", memo: { changedAt: 1100 } },
  },
  {
    name: "a dip below the threshold restarts the window",
    set: setOf(1, 4),
    memo: { aboveSince: 100 },
    now: 1100,
    want: { memo: {} },
  },
  {
    name: "at its most: never more",
    set: setOf(3, 100),
    memo: { aboveSince: 0 },
    now: 10_000,
    want: { memo: {} },
  },
  {
    name: "a replica still loading: no decision, and the windows start again",
    set: setOf(2, 50, 1),
    memo: { aboveSince: 0, changedAt: 50 },
    now: 10_000,
    want: { memo: { changedAt: 50 } },
  },
  {
    name: "quiet (one fewer holds half the threshold each): the down window starts",
    set: setOf(3, 4),
    memo: {},
    now: 100,
    want: { memo: { belowSince: 100 } },
  },
  {
    name: "quiet for the down window, long after its last change: one retires",
    set: setOf(3, 4),
    memo: { belowSince: 100, changedAt: 0 },
    now: 5100,
    want: { direction: "down", memo: { changedAt: 5100 } },
  },
  {
    name: "quiet, but its last change was within a down window: waits (no flapping)",
    set: setOf(3, 0),
    memo: { belowSince: 100, changedAt: 4000 },
    now: 8000,
    want: { memo: { belowSince: 100, changedAt: 4000 } },
  },
  {
    name: "not quiet enough (one fewer would hold more than half the threshold each): stays",
    set: setOf(3, 5),
    memo: { belowSince: 100 },
    now: 100_000,
    want: { memo: {} },
  },
  {
    name: "at its least: never fewer",
    set: setOf(1, 0),
    memo: { belowSince: 0 },
    now: 100_000,
    want: { memo: {} },
  },
  {
    name: "a replica retiring with requests in flight: waits, and no other step",
    set: setOf(3, 2, 3, { since: 5000, inFlight: 1 }),
    memo: { belowSince: 0, changedAt: 5000 },
    now: 60_000,
    want: { memo: { changedAt: 5000 } },
  },
  {
    name: "the retiring replica's requests ended: removed at once",
    set: setOf(3, 1, 3, { since: 5000, inFlight: 0 }),
    memo: { changedAt: 5000 },
    now: 5100,
    want: { direction: "down", memo: { changedAt: 5000 } },
  },
  {
    name: "the retiring replica still counts requests after retireMs: removed anyway",
    set: setOf(2, 3, 2, { since: 5000, inFlight: 3 }),
    memo: { changedAt: 5000 },
    now: 65_000,
    want: { direction: "down", memo: { changedAt: 5000 } },
  },
  {
    name: "the retiring replica idle while another is still loading: removed all the same",
    set: setOf(3, 0, 1, { since: 5000, inFlight: 0 }),
    memo: { changedAt: 5000 },
    now: 5100,
    want: { direction: "down", memo: { changedAt: 5000 } },
  },
  {
    name: "load back above the threshold on the others while one retires: the up window starts",
    set: setOf(2, 5, 2, { since: 5000, inFlight: 1 }),
    memo: { changedAt: 5000 },
    now: 6000,
    want: { memo: { changedAt: 5000, aboveSince: 6000 } },
  },
  {
    name: "above for the whole window while one retires: recalled, even at the set's most",
    set: setOf(3, 9, 3, { since: 5000, inFlight: 1 }),
    memo: { aboveSince: 6000, changedAt: 5000 },
    now: 7000,
    want: { direction: "up", memo: { changedAt: 7000 } },
  },
];

describe("scaleStep", () => {
  for (const c of cases)
    it(c.name, () => {
      const step = scaleStep(c.set, c.memo, c.now, W);
      expect(step.direction).toBe(c.want.direction);
      expect(step.memo).toEqual(c.want.memo);
    });

  it("says why, in figures", () => {
    const up = scaleStep(setOf(1, 9), { aboveSince: 0 }, 1500, W);
    expect(up.direction && up.reason).toBe(
      "9 requests in flight on 1 ready replica(s), above 4 each for 1.5 s: one more (at most 3)",
    );
    const down = scaleStep(setOf(2, 1), { belowSince: 0 }, 6000, W);
    expect(down.direction && down.reason).toBe(
      "1 requests in flight on 2 replicas for 6 s: 1 hold them within half of 4 each; one retires (at least 1)",
    );
    const recall = scaleStep(setOf(2, 5, 2, { since: 0, inFlight: 1 }), { aboveSince: 0 }, 1000, W);
    expect(recall.direction && recall.reason).toBe(
      "5 requests in flight on 1 ready replica(s), above 4 each for 1 s: the retiring replica kept",
    );
    const ended = scaleStep(setOf(2, 0, 2, { since: 0, inFlight: 0 }), {}, 2500, W);
    expect(ended.direction && ended.reason).toBe(
      "the retiring replica's requests ended after 2.5 s: removed",
    );
    const late = scaleStep(setOf(2, 2, 2, { since: 0, inFlight: 2 }), {}, 60_000, W);
    expect(late.direction && late.reason).toBe(
      "the retiring replica still counted 2 request(s) in flight after 60 s: removed",
    );
  });
});

describe("scaleSets", () => {
  it("groups the sets that scale, with their ready replicas and requests in flight", () => {
    const s: ControlState = replicaWith(["a", "b"]);
    const dep = (id: string, inst: string, scale = true): Deployment => ({
      deployment_id: id,
      model_id: instanceOn("x").model_id,
      min_nodes: 1,
      sharding: "Pipeline",
      replica_set: scale ? "rs-1" : "rs-2",
      ...(scale ? { scale: policy } : {}),
      excluded_peer_keys: [],
      created_at: 0,
      instance_id: inst as InstanceId,
      status: "Placed",
    });
    s.deployments = {
      "d-1": dep("d-1", "i-1"),
      "d-2": dep("d-2", "i-2"),
      "d-3": dep("d-3", "i-3", false),
    };
    s.runners[runnerKey("i-1", 0)] = {
      instance_id: "i-1" as InstanceId,
      node_id: "n-a" as NodeId,
      rank: 0,
      state: "RunnerReady",
      restarts: 0,
      since: 0,
    };
    const inFlight = (id: string) => (id === "i-1" ? 3 : id === "i-2" ? 2 : 7);
    const sets = scaleSets(s, inFlight);
    expect(sets).toMatchObject([{ replica_set: "rs-1", ready: 1, inFlight: 5, policy }]);
    expect(sets[0]!.retiring).toBeUndefined();
    expect(sets[0]!.deployments.map((d) => d.deployment_id)).toEqual(["d-1", "d-2"]);
    // A retiring replica: since when, and its own requests in flight.
    s.deployments["d-2"] = { ...s.deployments["d-2"]!, retiring_since: 40 };
    expect(scaleSets(s, inFlight)[0]!.retiring).toEqual({ since: 40, inFlight: 2 });
    // Every set, for GET /state: the one without a policy too.
    const all = replicaSets(s, () => 1);
    expect(
      all.map((r) => [r.replica_set, r.scale?.max_replicas, r.deployments.length, r.inFlight]),
    ).toEqual([
      ["rs-1", 3, 2, 2],
      ["rs-2", undefined, 1, 1],
    ]);
  });
});
