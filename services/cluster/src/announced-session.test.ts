// AnnouncedSession: which events of a not-yet-adopted session are held, and what adopting takes.
import { describe, expect, it } from "vitest";
import type { IndexedEvent, NodeId, SessionId } from "@ic/protocol";
import { AnnouncedSession } from "./announced-session.ts";

const started = (session: string, master = "p-b"): IndexedEvent => ({
  index: 1,
  session_id: session as SessionId,
  at: 0,
  event: {
    type: "SessionStarted",
    session: {
      session_id: session as SessionId,
      master_node_id: "n-b" as NodeId,
      master_peer_key: master,
      master_started_at: 2,
      started_at: 0,
    },
    members: [],
    models: [],
    instances: [],
    runners: [],
    deployments: [],
    intent_restored: true,
  },
});
const left = (session: string, index: number): IndexedEvent => ({
  index,
  session_id: session as SessionId,
  at: 0,
  event: { type: "NodeLeft", node_id: `n-${index}` as NodeId, reason: "test" },
});
const indexes = (evs: IndexedEvent[]) => evs.map((e) => e.index);

describe("AnnouncedSession", () => {
  it.each([
    { what: "a run without gaps", offered: [2, 3, 4], held: [1, 2, 3, 4] },
    { what: "up to the first gap, nothing after it", offered: [2, 4, 5, 3], held: [1, 2] },
    { what: "a duplicate is not held twice", offered: [2, 2, 3], held: [1, 2, 3] },
    { what: "only the announcement", offered: [], held: [1] },
  ])("holds $what", ({ offered, held }) => {
    const a = new AnnouncedSession();
    a.announce(started("s-2"), "o-b");
    for (const i of offered) expect(a.offer(left("s-2", i), "o-b")).toBe(true);
    expect(indexes(a.take("s-2", "p-b"))).toEqual(held);
  });

  it("is not the judge of events of another session or from another connection", () => {
    const a = new AnnouncedSession();
    expect(a.offer(left("s-2", 2), "o-b")).toBe(false); // nothing announced
    a.announce(started("s-2"), "o-b");
    expect(a.offer(left("s-1", 2), "o-b")).toBe(false);
    expect(a.offer(left("s-2", 2), "o-x")).toBe(false);
    expect(a.offer(started("s-2"), "o-b")).toBe(false);
    expect(indexes(a.take("s-2", "p-b"))).toEqual([1]);
  });

  it("stops holding at its bound", () => {
    const a = new AnnouncedSession(3);
    a.announce(started("s-2"), "o-b");
    for (const i of [2, 3, 4, 5]) a.offer(left("s-2", i), "o-b");
    expect(indexes(a.take("s-2", "p-b"))).toEqual([1, 2, 3]);
  });

  it("a later announcement replaces the held session", () => {
    const a = new AnnouncedSession();
    a.announce(started("s-2"), "o-b");
    a.offer(left("s-2", 2), "o-b");
    a.announce(started("s-3", "p-c"), "o-c");
    expect(a.take("s-2", "p-b")).toEqual([]);
  });

  it("gives nothing for another session or another master, and holds nothing after any take", () => {
    const a = new AnnouncedSession();
    a.announce(started("s-2"), "o-b");
    expect(a.take("s-2", "p-x")).toEqual([]);
    expect(a.take("s-2", "p-b")).toEqual([]);
    a.announce(started("s-2"), "o-b");
    expect(a.take("s-9", "p-b")).toEqual([]);
    expect(a.take("s-2", "p-b")).toEqual([]);
  });
});
