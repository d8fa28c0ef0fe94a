// Table tests of the idle-unload rule: an instance with a keep_alive leaves once idle that long, never
// while a request is in flight, never before it is ready, and not before its first request had time
// to arrive; an operator's placement (no keep_alive, or -1) never.
import { describe, expect, it } from "vitest";
import { runnerKey } from "@ic/protocol";
import type { ControlState, InstanceId, NodeId } from "@ic/protocol";
import { instanceOn, replicaWith } from "./test-support.ts";
import { idleUnloads, instanceUse, InstanceUsage, UNUSED_GRACE_MS } from "./usage.ts";

/** Instance i-1 on b, its deployment with `keepAlive` (undefined: an operator's), rank 0 `ready`. */
function world(keepAlive: number | undefined, ready = true): ControlState {
  const s = replicaWith(["a", "b"]);
  s.instances["i-1"] = instanceOn("i-1");
  s.runners[runnerKey("i-1", 0)] = {
    instance_id: "i-1" as InstanceId,
    node_id: "n-b" as NodeId,
    rank: 0,
    state: ready ? "RunnerReady" : "RunnerWarmingUp",
    restarts: 0,
    since: 0,
  };
  s.deployments["d-1"] = {
    deployment_id: "d-1",
    model_id: s.instances["i-1"].model_id,
    min_nodes: 1,
    sharding: "Pipeline",
    excluded_peer_keys: [],
    created_at: 0,
    instance_id: "i-1" as InstanceId,
    status: "Placed",
    ...(keepAlive !== undefined ? { keep_alive_ms: keepAlive, on_demand: true as const } : {}),
  };
  return s;
}

interface Case {
  readonly name: string;
  readonly keepAlive: number | undefined;
  readonly ready?: boolean;
  /** What happened, at which ms: seen (first tick), began/ended a request. */
  readonly steps: readonly ["seen" | "began" | "ended", number][];
  readonly open?: number;
  readonly now: number;
  readonly unload: boolean;
}

const cases: Case[] = [
  {
    name: "idle past its keep_alive after serving: unloaded",
    keepAlive: 5000,
    steps: [
      ["seen", 0],
      ["began", 100],
      ["ended", 200],
    ],
    now: 5200,
    unload: true,
  },
  {
    name: "idle less than its keep_alive: kept",
    keepAlive: 5000,
    steps: [
      ["seen", 0],
      ["began", 100],
      ["ended", 200],
    ],
    now: 5199,
    unload: false,
  },
  {
    name: "keep_alive 0: unloaded once its answer is done",
    keepAlive: 0,
    steps: [
      ["seen", 0],
      ["began", 100],
      ["ended", 200],
    ],
    now: 200,
    unload: true,
  },
  {
    name: "a request in flight keeps it, however long",
    keepAlive: 0,
    steps: [
      ["seen", 0],
      ["began", 100],
    ],
    open: 1,
    now: 1_000_000,
    unload: false,
  },
  {
    name: "keep_alive 0, nothing served yet: kept for the grace",
    keepAlive: 0,
    steps: [["seen", 0]],
    now: UNUSED_GRACE_MS - 1,
    unload: false,
  },
  {
    name: "nothing served within the grace: unloaded",
    keepAlive: 0,
    steps: [["seen", 0]],
    now: UNUSED_GRACE_MS,
    unload: true,
  },
  {
    name: "not ready yet (staging, warming up): kept",
    keepAlive: 0,
    ready: false,
    steps: [
      ["seen", 0],
      ["began", 1],
      ["ended", 2],
    ],
    now: 1_000_000,
    unload: false,
  },
  {
    name: "an operator's placement: never",
    keepAlive: undefined,
    steps: [["seen", 0]],
    now: 1_000_000_000,
    unload: false,
  },
  {
    name: "keep_alive -1: never",
    keepAlive: -1,
    steps: [
      ["seen", 0],
      ["began", 1],
      ["ended", 2],
    ],
    now: 1_000_000_000,
    unload: false,
  },
];

describe("idleUnloads", () => {
  for (const c of cases)
    it(c.name, () => {
      const s = world(c.keepAlive, c.ready ?? true);
      const usage = new InstanceUsage();
      for (const [what, at] of c.steps) {
        if (what === "seen") usage.observe(s, at);
        else if (what === "began") usage.began("i-1", at);
        else usage.ended("i-1", at);
      }
      const got = idleUnloads(s, c.now, usage, () => c.open ?? 0);
      expect(got.map((u) => u.instance_id)).toEqual(c.unload ? ["i-1"] : []);
    });

  it("says why, and forgets an instance that is gone", () => {
    const s = world(2000);
    const usage = new InstanceUsage();
    usage.observe(s, 0);
    usage.began("i-1", 10);
    usage.ended("i-1", 1000);
    expect(idleUnloads(s, 3500, usage, () => 0)).toEqual([
      { instance_id: "i-1", reason: "idle for 2.5 s (keep_alive 2 s): unloaded" },
    ]);
    expect(instanceUse(usage, () => 0)("i-1")).toEqual({ open: 0, lastUsedAt: 1000 });
    delete s.instances["i-1"];
    usage.observe(s, 4000);
    expect(usage.get("i-1")).toBeUndefined();
  });
});
