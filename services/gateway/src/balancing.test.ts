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

describe("chooseInstance with a prefix key (bounded-load rendezvous)", () => {
  const four = [A, B, C, ready("i-d", "p-far", 4)];
  const pick = (key: string | undefined, load: Record<string, number> = {}, list = four) =>
    chooseInstance(list, {
      outstanding: new Map(Object.entries(load)),
      selfPeerKey: "p-self",
      rttMs: (p) => rtt[p],
      prefixKey: key,
    })?.instance.instance_id;
  const keys = Array.from({ length: 400 }, (_, i) => `conversation-${i}`);

  it("sends a key to the same instance every time, whatever order the list comes in", () => {
    for (const k of keys.slice(0, 50)) {
      const first = pick(k);
      expect(pick(k, {}, [...four].reverse())).toBe(first);
      expect(pick(k, {}, [four[2]!, four[0]!, four[3]!, four[1]!])).toBe(first);
    }
  });

  it("spreads keys over every instance, none starved (400 keys, 4 instances: each between 60 and 140)", () => {
    const counts = new Map<string, number>();
    for (const k of keys) counts.set(pick(k)!, (counts.get(pick(k)!) ?? 0) + 1);
    expect([...counts.keys()].sort()).toEqual(["i-a", "i-b", "i-c", "i-d"]);
    for (const n of counts.values()) {
      expect(n).toBeGreaterThanOrEqual(60);
      expect(n).toBeLessThanOrEqual(140);
    }
  });

  it("moves a key off its instance once that one reaches 1.25 times the mean load or the mean plus 2, to the next in its ranking", () => {
    const k = keys[0]!;
    const home = pick(k)!;
    // Total with this request 4 + 1 = 5 over 4: cap max(ceil(1.25 * 1.25), ceil(1.25) + 2) = 4; home at 1 stays.
    expect(pick(k, { [home]: 1, ...others(home, 1) })).toBe(home);
    // Home at 3, the others idle: total 4, mean 1, cap max(2, 1 + 2) = 3: it moves, always to the same next one.
    const next = pick(k, { [home]: 3 });
    expect(next).not.toBe(home);
    expect(pick(k, { [home]: 3 })).toBe(next);
    // Losing an instance moves only the keys it held: a key whose home stays keeps it.
    const without = four.filter((r) => r.instance.instance_id !== next);
    expect(pick(k, {}, without)).toBe(home);
  });

  it("removing one of four instances moves only the keys it held", () => {
    const gone = "i-c";
    const three = four.filter((r) => r.instance.instance_id !== gone);
    let moved = 0;
    for (const k of keys) {
      const before = pick(k)!;
      const after = pick(k, {}, three)!;
      if (before !== gone) expect(after).toBe(before);
      else moved++;
    }
    expect(moved).toBeGreaterThan(0);
  });

  it("a flood of one key spreads once its home is full: no instance goes above the bound", () => {
    const load: Record<string, number> = {};
    for (let i = 0; i < 40; i++) {
      const to = pick("hot", load)!;
      load[to] = (load[to] ?? 0) + 1;
    }
    // 40 requests over 4: mean 10, bound ceil(1.25 * 40 / 4) = 13.
    for (const r of four) expect(load[r.instance.instance_id] ?? 0).toBeLessThanOrEqual(13);
    expect(Object.keys(load)).toHaveLength(4);
  });

  it("bounds on this gateway's own loads when given: other gateways' (stale) counts do not move a key", () => {
    const k = keys[0]!;
    const home = pick(k)!;
    const stale = { [home]: 9 };
    const viaBound = chooseInstance(four, {
      outstanding: new Map(Object.entries(stale)),
      boundLoad: new Map([[home, 0]]),
      selfPeerKey: "p-self",
      rttMs: (p) => rtt[p],
      prefixKey: k,
    });
    expect(viaBound?.instance.instance_id).toBe(home);
    expect(pick(k, stale)).not.toBe(home);
  });

  it("one instance, or no key: the least-loaded rule as before", () => {
    expect(pick("k", {}, [B])).toBe("i-b");
    expect(pick(undefined, { "i-a": 2, "i-b": 1, "i-d": 1 })).toBe("i-c");
  });
});

describe("chooseInstance on the prompt caches (what is held less the queue, then the key's ranking)", () => {
  const four = [A, B, C, ready("i-d", "p-far", 4)];
  const pick = (
    held: Record<string, number>,
    load: Record<string, number> = {},
    key = "k",
    dropped: Record<string, number> = {},
    o: { pending?: Record<string, number>; bound?: Record<string, number> } = {},
  ) =>
    chooseInstance(four, {
      outstanding: new Map(Object.entries(load)),
      ...(o.bound ? { boundLoad: new Map(Object.entries(o.bound)) } : {}),
      selfPeerKey: "p-self",
      rttMs: (p) => rtt[p],
      prefixKey: key,
      cache: {
        held: (id) => held[id] ?? 0,
        promptChars: 512,
        displaced: (id) => dropped[id] ?? 0,
        pending: (id) => o.pending?.[id] ?? 0,
      },
    })?.instance.instance_id;
  // The cluster's counts (heartbeats included) weigh in the ranking; this gateway's own, none here,
  // bound it: so the rows below test the weights, not the bound.
  const unbound = { bound: {} };

  it("a new prompt goes where it drops nothing held, before where the key's ranking puts it", () => {
    const full = { "i-a": 512, "i-b": 512, "i-c": 512, "i-d": 512 };
    for (const k of ["a", "b", "c", "d", "e"]) {
      const first = pick({}, {}, k);
      // Every instance full but one: that one, whatever the key.
      const room = ["i-a", "i-b", "i-c", "i-d"].find((id) => id !== first)!;
      expect(pick({}, {}, k, { ...full, [room]: 0 })).toBe(room);
    }
  });

  it("between equals, the instance with the most room, before the key's ranking", () => {
    for (const k of ["a", "b", "c", "d", "e"]) {
      const first = pick({}, {}, k);
      const roomy = ["i-a", "i-b", "i-c", "i-d"].find((id) => id !== first)!;
      const chosen = chooseInstance(four, {
        outstanding: new Map(),
        selfPeerKey: "p-self",
        rttMs: (p) => rtt[p],
        prefixKey: k,
        cache: { held: () => 0, promptChars: 512, room: (id) => (id === roomy ? 3 : 1) },
      })?.instance.instance_id;
      expect(chosen).toBe(roomy);
    }
  });

  it("dropping a held prompt costs half of it: less than four requests more in flight for 400 characters, more for 600", () => {
    const busy = { "i-a": 4, "i-b": 4, "i-d": 4 };
    expect(pick({}, busy, "k", { "i-c": 400 }, unbound)).toBe("i-c");
    expect(pick({}, busy, "k", { "i-c": 600 }, unbound)).not.toBe("i-c");
  });

  it.each([
    ["the instance holding most of the prompt", { "i-c": 512, "i-a": 128 }, {}, "i-c"],
    ["past the load bound: the next holding most", { "i-c": 512, "i-a": 128 }, { "i-c": 4 }, "i-a"],
    [
      "the whole prompt held is worth one request more in flight",
      { "i-b": 500 },
      { "i-b": 1 },
      "i-b",
    ],
  ])("%s", (_, held, load, want) => {
    expect(pick(held, load)).toBe(want);
  });

  it.each([
    // An eighth of the prompt (64 of 512 characters) per request in flight there.
    ["the whole prompt held is worth seven requests more in flight", { "i-b": 500 }, 7, true],
    ["and not eight (no herd on a shared prefix)", { "i-b": 500 }, 8, false],
    ["200 characters held are worth three more", { "i-b": 200 }, 3, true],
    ["and not four", { "i-b": 200 }, 4, false],
  ])("%s", (_, held, n, stays) => {
    const chosen = pick(held, { "i-b": n }, "k", {}, unbound);
    if (stays) expect(chosen).toBe("i-b");
    else expect(chosen).not.toBe("i-b");
  });

  it.each([
    ["prefill queued there shorter than what it holds: it stays", 400, true],
    ["longer: the request goes where it computes its prompt at once", 600, false],
  ])("%s", (_, pending, stays) => {
    const chosen = pick({ "i-b": 500 }, {}, "k", {}, { pending: { "i-b": pending } });
    if (stays) expect(chosen).toBe("i-b");
    else expect(chosen).not.toBe("i-b");
  });

  it("nothing held anywhere: a new prompt avoids the instance computing another, before the key's ranking", () => {
    for (const k of ["a", "b", "c", "d", "e"]) {
      const first = pick({}, {}, k)!;
      expect(pick({}, {}, k, {}, { pending: { [first]: 1000 } })).not.toBe(first);
    }
  });

  it("nothing held: the least loaded, then the key's ranking", () => {
    expect(pick({}, { "i-a": 1, "i-b": 1, "i-c": 0, "i-d": 1 })).toBe("i-c");
  });

  it("nothing held anywhere, or held alike, and loads alike: the key's rendezvous ranking decides", () => {
    for (const k of ["a", "b", "c", "d", "e"]) {
      const hashOnly = chooseInstance(four, {
        outstanding: new Map(),
        selfPeerKey: "p-self",
        rttMs: (p) => rtt[p],
        prefixKey: k,
      })?.instance.instance_id;
      expect(pick({}, {}, k)).toBe(hashOnly);
      expect(pick({ "i-a": 64, "i-b": 64, "i-c": 64, "i-d": 64 }, {}, k)).toBe(hashOnly);
    }
  });
});

function others(home: string, n: number): Record<string, number> {
  return Object.fromEntries(
    ["i-a", "i-b", "i-c", "i-d"].filter((id) => id !== home).map((id) => [id, n]),
  );
}

describe("outstandingByInstance", () => {
  it("adds this gateway's live requests to what the other nodes' heartbeats said", () => {
    const load = new RequestLoad();
    load.begin("i-a");
    const ticket = load.begin("i-b");
    load.begin("i-b");
    ticket.end();
    ticket.end(); // ending twice counts once
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

  it("keeps each request's prefill ahead until the engine answers or the request ends, once", () => {
    const load = new RequestLoad();
    const a = load.begin("i-a", 1000);
    const b = load.begin("i-a", 300);
    load.begin("i-b"); // no prefill known: counted in flight, not queued
    expect([load.prefillAhead("i-a"), load.prefillAhead("i-b")]).toEqual([1300, 0]);
    a.prefilled();
    a.prefilled();
    expect(load.prefillAhead("i-a")).toBe(300);
    a.end(); // already prefilled: only its count goes
    expect(load.prefillAhead("i-a")).toBe(300);
    b.end(); // ended before its first byte (failed, or a whole answer): its prefill goes too
    b.prefilled();
    expect(load.prefillAhead("i-a")).toBe(0);
    expect(load.heartbeatPart()).toEqual({ "i-b": 1 });
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
