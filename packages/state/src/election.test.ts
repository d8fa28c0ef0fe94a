import { describe, expect, it } from "vitest";
import { compareSeniority, elect, nodeIdFor } from "./election.ts";
import type { ElectionInput, HeardPeer } from "./election.ts";

const T = 3000;
const A = { peer_key: "a", started_at: 100 };
const B = { peer_key: "b", started_at: 200 };
const C = { peer_key: "c", started_at: 300 };

function heard(
  p: { peer_key: string; started_at: number },
  lastHeard: number,
  masterOf: string | null = null,
): HeardPeer {
  return { ...p, lastHeard, masterOf };
}

/** A follower heard in `session`. */
function follower(
  p: { peer_key: string; started_at: number },
  lastHeard: number,
  session: string,
): HeardPeer {
  return { ...p, lastHeard, masterOf: null, session };
}

function input(over: Partial<ElectionInput>): ElectionInput {
  return {
    now: 10_000,
    self: B,
    upSince: 0,
    current: null,
    selfIsMaster: false,
    peers: [],
    electionTimeoutMs: T,
    ...over,
  };
}

describe("seniority", () => {
  it("orders by start time, then peer key, and is total", () => {
    expect(compareSeniority(A, B)).toBeLessThan(0);
    expect(
      compareSeniority({ peer_key: "x", started_at: 1 }, { peer_key: "y", started_at: 1 }),
    ).toBeLessThan(0);
    expect(compareSeniority(A, A)).toBe(0);
  });
});

describe("formation", () => {
  it("waits out the election timeout before anyone starts a session", () => {
    const d = elect(input({ now: 1000, upSince: 0, self: A, peers: [heard(B, 900)] }));
    expect(d.kind).toBe("wait");
  });
  it("the most senior live node starts the session once the timeout passed", () => {
    expect(elect(input({ now: 3500, self: A, peers: [heard(B, 3400), heard(C, 3400)] })).kind).toBe(
      "start_session",
    );
    expect(elect(input({ now: 3500, self: B, peers: [heard(A, 3400), heard(C, 3400)] }))).toEqual({
      kind: "wait",
      candidate: "a",
    });
  });
  it("a lone node elects itself", () => {
    expect(elect(input({ now: 3500, self: C, peers: [] })).kind).toBe("start_session");
  });
  it("a joining node adopts a live master's session at once, without waiting", () => {
    const d = elect(input({ now: 100, upSince: 50, self: C, peers: [heard(A, 90, "s1")] }));
    expect(d).toEqual({ kind: "adopt", session_id: "s1", master: A });
  });
});

describe("master loss", () => {
  const current = { session_id: "s1", master: A };
  it("stays while the master was heard within the election timeout", () => {
    const d = elect(
      input({ now: 10_000, self: B, current, peers: [heard(A, 7_500, "s1"), heard(C, 9_900)] }),
    );
    expect(d.kind).toBe("stay");
  });
  it("after the election timeout of silence the most senior survivor starts a new session", () => {
    const peers = [heard(A, 6_900, "s1"), heard(C, 9_900)];
    expect(elect(input({ now: 10_000, self: B, current, peers })).kind).toBe("start_session");
    expect(
      elect(
        input({ now: 10_000, self: C, current, peers: [heard(A, 6_900, "s1"), heard(B, 9_900)] }),
      ),
    ).toEqual({
      kind: "wait",
      candidate: "b",
    });
  });
  it("survivors then adopt the new master's session", () => {
    const d = elect(
      input({
        now: 10_100,
        self: C,
        current,
        peers: [heard(A, 6_900, "s1"), heard(B, 10_050, "s2")],
      }),
    );
    expect(d).toEqual({ kind: "adopt", session_id: "s2", master: B });
  });
  it("a restarted old master is junior and joins instead of taking over", () => {
    const restartedA = { peer_key: "a2", started_at: 20_000 };
    const d = elect(
      input({
        now: 20_100,
        upSince: 20_000,
        self: restartedA,
        peers: [heard(B, 20_050, "s2"), heard(C, 20_050)],
      }),
    );
    expect(d).toEqual({ kind: "adopt", session_id: "s2", master: B });
  });
});

describe("partition split and heal", () => {
  it("each side of a split elects its own master", () => {
    // Side 1: A alone (was master). Side 2: B and C lost A.
    const side2 = elect(
      input({
        now: 10_000,
        self: B,
        current: { session_id: "s1", master: A },
        peers: [heard(A, 6_000, "s1"), heard(C, 9_990)],
      }),
    );
    expect(side2.kind).toBe("start_session");
    const side1 = elect(
      input({
        now: 10_000,
        self: A,
        current: { session_id: "s1", master: A },
        selfIsMaster: true,
        peers: [heard(B, 6_000), heard(C, 6_000)],
      }),
    );
    expect(side1.kind).toBe("stay");
  });
  it("on heal the side with more live nodes keeps its session, even under a junior master", () => {
    // A (most senior, the old master) was cut off alone in s1; B and C formed s2.
    const a = elect(
      input({
        now: 20_010,
        self: A,
        current: { session_id: "s1", master: A },
        selfIsMaster: true,
        peers: [heard(B, 20_000, "s2"), follower(C, 20_000, "s2")],
      }),
    );
    expect(a).toEqual({ kind: "adopt", session_id: "s2", master: B });
    const b = elect(
      input({
        now: 20_010,
        self: B,
        current: { session_id: "s2", master: B },
        selfIsMaster: true,
        peers: [heard(A, 20_000, "s1"), follower(C, 20_000, "s2")],
      }),
    );
    expect(b.kind).toBe("stay");
    const c = elect(
      input({
        now: 20_010,
        self: C,
        current: { session_id: "s2", master: B },
        peers: [heard(A, 20_000, "s1"), heard(B, 20_000, "s2")],
      }),
    );
    expect(c.kind).toBe("stay");
    // After A steps down it follows s2; everyone stays in s2 from then on.
    for (const self of [A, B, C]) {
      const peers = [
        heard(B, 21_900, "s2"),
        follower(A, 21_900, "s2"),
        follower(C, 21_900, "s2"),
      ].filter((p) => p.peer_key !== self.peer_key);
      const d = elect(
        input({
          now: 22_000,
          self,
          current: { session_id: "s2", master: B },
          selfIsMaster: self === B,
          peers,
        }),
      );
      expect(d.kind).toBe("stay");
    }
  });

  it("a lone master that hears the other side's master before its followers stays until it has heard them", () => {
    // Right after the heal A has heard only B: one node each, the tie goes to seniority (A).
    const early = elect(
      input({
        now: 20_010,
        self: A,
        current: { session_id: "s1", master: A },
        selfIsMaster: true,
        peers: [heard(B, 20_000, "s2"), heard(C, 10_000)],
      }),
    );
    expect(early.kind).toBe("stay");
    // The majority never adopts the smaller session meanwhile: it hears its own side completely.
    const b = elect(
      input({
        now: 20_010,
        self: B,
        current: { session_id: "s2", master: B },
        selfIsMaster: true,
        peers: [heard(A, 20_000, "s1"), follower(C, 20_000, "s2")],
      }),
    );
    expect(b.kind).toBe("stay");
    const later = elect(
      input({
        now: 20_510,
        self: A,
        current: { session_id: "s1", master: A },
        selfIsMaster: true,
        peers: [heard(B, 20_500, "s2"), follower(C, 20_500, "s2")],
      }),
    );
    expect(later).toEqual({ kind: "adopt", session_id: "s2", master: B });
  });

  it("sides of equal size heal to the session of the most senior master", () => {
    const D = { peer_key: "d", started_at: 400 };
    // s1 = {A, C}, s2 = {B, D}.
    const b = elect(
      input({
        now: 20_010,
        self: B,
        current: { session_id: "s2", master: B },
        selfIsMaster: true,
        peers: [heard(A, 20_000, "s1"), follower(C, 20_000, "s1"), follower(D, 20_000, "s2")],
      }),
    );
    expect(b).toEqual({ kind: "adopt", session_id: "s1", master: A });
    const d = elect(
      input({
        now: 20_010,
        self: D,
        current: { session_id: "s2", master: B },
        peers: [heard(A, 20_000, "s1"), follower(C, 20_000, "s1"), heard(B, 20_000, "s2")],
      }),
    );
    expect(d).toEqual({ kind: "adopt", session_id: "s1", master: A });
    const a = elect(
      input({
        now: 20_010,
        self: A,
        current: { session_id: "s1", master: A },
        selfIsMaster: true,
        peers: [heard(B, 20_000, "s2"), follower(C, 20_000, "s1"), follower(D, 20_000, "s2")],
      }),
    );
    expect(a.kind).toBe("stay");
  });

  it("a non-master cut off alone (its own session) rejoins the majority's session", () => {
    // D was cut off alone and started s4; A, B, C stayed in s1 under A.
    const D = { peer_key: "d", started_at: 400 };
    const d = elect(
      input({
        now: 20_010,
        self: D,
        current: { session_id: "s4", master: D },
        selfIsMaster: true,
        peers: [heard(A, 20_000, "s1"), follower(B, 20_000, "s1"), follower(C, 20_000, "s1")],
      }),
    );
    expect(d).toEqual({ kind: "adopt", session_id: "s1", master: A });
    const a = elect(
      input({
        now: 20_010,
        self: A,
        current: { session_id: "s1", master: A },
        selfIsMaster: true,
        peers: [follower(B, 20_000, "s1"), follower(C, 20_000, "s1"), heard(D, 20_000, "s4")],
      }),
    );
    expect(a.kind).toBe("stay");
  });
});

describe("node ids", () => {
  it("are stable within a session and change with the session", () => {
    expect(nodeIdFor("s1", "a")).toBe(nodeIdFor("s1", "a"));
    expect(nodeIdFor("s1", "a")).not.toBe(nodeIdFor("s2", "a"));
    expect(nodeIdFor("s1", "a")).not.toBe(nodeIdFor("s1", "b"));
  });
});
