import { describe, expect, it } from "vitest";
import type { CommandId, Instance, InstanceId, ModelId, NodeId, Task, TaskId } from "@ic/protocol";
import { chooseInstance, outstandingByInstance } from "./balancing.ts";
import type { ReadyInstance } from "./readiness.ts";

function ready(id: string, peer: string, created: number): ReadyInstance {
  const instance: Instance = {
    instance_id: id as InstanceId,
    model_id: "m/x" as ModelId,
    sharding: "Pipeline",
    created_at: created,
    assignments: [
      {
        node_id: `n-${peer}` as NodeId,
        peer_key: peer,
        rank: 0,
        weight_bytes: 1,
        required_bytes: 1,
      },
    ],
  };
  return { instance, endpoint: `http://${id}` };
}

function task(n: number, instance: string): Task {
  return {
    task_id: `t-${n}` as TaskId,
    command_id: `c-${n}` as CommandId,
    model_id: "m/x" as ModelId,
    instance_id: instance as InstanceId,
    gateway_node_id: "n-g" as NodeId,
    created_at: 0,
  };
}

const A = ready("i-a", "p-self", 1); // local, oldest
const B = ready("i-b", "p-near", 2);
const C = ready("i-c", "p-far", 3);
const rtt: Record<string, number> = { "p-near": 0.4, "p-far": 3 };

describe("chooseInstance", () => {
  const table: {
    name: string;
    ready: ReadyInstance[];
    load: Record<string, number>;
    rtt?: Record<string, number>;
    want: string | undefined;
  }[] = [
    { name: "nothing ready", ready: [], load: {}, want: undefined },
    {
      name: "idle cluster: the local instance (latency 0)",
      ready: [C, B, A],
      load: {},
      want: "i-a",
    },
    {
      name: "fewest outstanding tasks wins over latency",
      ready: [A, B, C],
      load: { "i-a": 2, "i-b": 1 },
      want: "i-c",
    },
    { name: "tie on load: lowest latency", ready: [A, B, C], load: { "i-a": 1 }, want: "i-b" },
    { name: "tie on load, no local: nearest peer", ready: [C, B], load: {}, want: "i-b" },
    {
      name: "unknown latency sorts after known",
      ready: [C, B],
      load: {},
      rtt: { "p-far": 3 },
      want: "i-c",
    },
    {
      name: "tie on load and latency: oldest",
      ready: [C, ready("i-d", "p-far", 0)],
      load: {},
      want: "i-d",
    },
    {
      name: "same age and latency: lowest id",
      ready: [ready("i-z", "p-far", 5), ready("i-y", "p-far", 5)],
      load: {},
      want: "i-y",
    },
  ];
  for (const t of table) {
    it(t.name, () => {
      const r = chooseInstance(t.ready, {
        outstanding: new Map(Object.entries(t.load)),
        selfPeerKey: "p-self",
        rttMs: (p) => (t.rtt ?? rtt)[p],
      });
      expect(r?.instance.instance_id).toBe(t.want);
    });
  }
});

describe("outstandingByInstance", () => {
  it("counts replicated tasks and this gateway's requests not yet replicated, once each", () => {
    const tasks = [task(1, "i-a"), task(2, "i-a"), task(3, "i-b")];
    const pending = [
      { command_id: "c-1", instance_id: "i-a" }, // its task is replicated: not counted twice
      { command_id: "c-9", instance_id: "i-b" },
      { command_id: "c-10", instance_id: "i-c" },
    ];
    expect(Object.fromEntries(outstandingByInstance(tasks, pending))).toEqual({
      "i-a": 2,
      "i-b": 2,
      "i-c": 1,
    });
  });
  it("a burst from one gateway spreads before any task is replicated", () => {
    const pending: { command_id: string; instance_id: string }[] = [];
    const picks: string[] = [];
    for (let n = 0; n < 4; n++) {
      const r = chooseInstance([A, B], {
        outstanding: outstandingByInstance([], pending),
        selfPeerKey: "p-self",
        rttMs: (p) => rtt[p],
      })!;
      picks.push(r.instance.instance_id);
      pending.push({ command_id: `c-${n}`, instance_id: r.instance.instance_id });
    }
    expect(picks).toEqual(["i-a", "i-b", "i-a", "i-b"]);
  });
});
