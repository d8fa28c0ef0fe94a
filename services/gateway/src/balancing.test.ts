import { describe, expect, it } from "vitest";
import type { Instance, InstanceId, ModelId, NodeId } from "@ic/protocol";
import { chooseInstance } from "./balancing.ts";
import { outstandingByInstance, RequestLoad } from "./request-load.ts";
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
  it("adds this gateway's live requests to what the other nodes' heartbeats said", () => {
    const load = new RequestLoad();
    load.begin("i-a");
    const end = load.begin("i-b");
    load.begin("i-b");
    end();
    end(); // ending twice counts once
    const peers = [
      { peer_key: "p-self", outstanding: { "i-a": 40 } }, // its own stale heartbeat: ignored
      { peer_key: "p-2", outstanding: { "i-a": 2, "i-c": 1 } },
      { peer_key: "p-3" },
    ];
    expect(Object.fromEntries(outstandingByInstance(load.local(), peers, "p-self"))).toEqual({
      "i-a": 3,
      "i-b": 1,
      "i-c": 1,
    });
    expect(load.heartbeatPart()).toEqual({ "i-a": 1, "i-b": 1 });
  });

  it("a burst from one gateway spreads across instances before any heartbeat", () => {
    const load = new RequestLoad();
    const picks: string[] = [];
    for (let n = 0; n < 4; n++) {
      const r = chooseInstance([A, B], {
        outstanding: outstandingByInstance(load.local(), [], "p-self"),
        selfPeerKey: "p-self",
        rttMs: (p) => rtt[p],
      })!;
      picks.push(r.instance.instance_id);
      load.begin(r.instance.instance_id);
    }
    expect(picks).toEqual(["i-a", "i-b", "i-a", "i-b"]);
  });

  it("counts tasks open until each closes, once", () => {
    const load = new RequestLoad();
    const close = load.taskOpened();
    load.taskOpened();
    close();
    close();
    expect(load.tasksOpen).toBe(1);
  });
});
