import { describe, expect, it } from "vitest";
import type { IndexedEvent, SessionId } from "@ic/protocol";
import { intakeOf, replicaTakes, type IntakeView } from "./event-intake.ts";

const S1 = "s-1" as SessionId;
const S2 = "s-2" as SessionId;
const master = { peer_key: "p-m", started_at: 1 };

function ev(session: SessionId, masterKey?: string): IndexedEvent {
  const event =
    masterKey === undefined
      ? { type: "ModelDeregistered", model_id: "org/m" }
      : { type: "SessionStarted", session: { master_peer_key: masterKey } };
  return { index: 2, session_id: session, at: 0, event } as unknown as IndexedEvent;
}

const origins: Record<string, string> = {
  "p-m": "conn-m",
  "p-other": "conn-o",
  "p-self": "conn-s",
};
const view = (current: IntakeView["current"]): IntakeView => ({
  selfKey: "p-self",
  current,
  originOf: (k) => origins[k],
});

describe("intakeOf", () => {
  it.each([
    [
      "an event of this session from its master",
      ev(S1),
      "conn-m",
      view({ session_id: S1, master }),
      { kind: "take", announce: false, touch: "p-m", announcedMaster: undefined },
    ],
    [
      "an event of this session from another connection",
      ev(S1),
      "conn-o",
      view({ session_id: S1, master }),
      { kind: "refuse", why: "event 2 of s-1 not from its master" },
    ],
    ["an event before this node is in a session", ev(S1), "conn-m", view(null), { kind: "wait" }],
    [
      "an event of another session from this session's master",
      ev(S2),
      "conn-m",
      view({ session_id: S1, master }),
      { kind: "take", announce: false, touch: undefined, announcedMaster: undefined },
    ],
    [
      "another node's new session, from it",
      ev(S2, "p-other"),
      "conn-o",
      view({ session_id: S1, master }),
      { kind: "take", announce: true, touch: "p-other", announcedMaster: "p-other" },
    ],
    [
      "a new session from a master not heard yet",
      ev(S2, "p-unknown"),
      "conn-x",
      view({ session_id: S1, master }),
      { kind: "wait" },
    ],
    [
      "a new session naming a master, sent by another",
      ev(S2, "p-other"),
      "conn-m",
      view({ session_id: S1, master }),
      { kind: "refuse", why: "event 2 of s-2 not from its master" },
    ],
    [
      "this node's own session start echoed",
      ev(S1, "p-self"),
      "conn-s",
      view({ session_id: S1, master }),
      { kind: "take", announce: false, touch: "p-self", announcedMaster: undefined },
    ],
  ] as const)("%s", (_name, e, origin, v, want) => {
    expect(intakeOf(e, origin, v)).toEqual(want);
  });
});

describe("replicaTakes", () => {
  it.each([
    [
      "an event of this node's session",
      ev(S1),
      { sessionId: S1, isMaster: false, replicaSession: S1 },
      true,
    ],
    [
      "an event of another session",
      ev(S2),
      { sessionId: S1, isMaster: false, replicaSession: S1 },
      false,
    ],
    [
      "no session yet",
      ev(S1),
      { sessionId: undefined, isMaster: false, replicaSession: undefined },
      false,
    ],
    [
      "on the master (it applied it as it emitted it)",
      ev(S1),
      { sessionId: S1, isMaster: true, replicaSession: S1 },
      false,
    ],
    [
      "a SessionStarted the replica holds already",
      ev(S1, "p-m"),
      { sessionId: S1, isMaster: false, replicaSession: S1 },
      false,
    ],
    [
      "a SessionStarted of the session just adopted",
      ev(S1, "p-m"),
      { sessionId: S1, isMaster: false, replicaSession: S2 },
      true,
    ],
  ] as const)("%s", (_name, e, v, want) => {
    expect(replicaTakes(e, v)).toBe(want);
  });
});
