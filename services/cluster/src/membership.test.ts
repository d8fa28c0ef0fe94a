import { describe, expect, it } from "vitest";
import { createLogger } from "@ic/log";
import { FakeClock } from "@ic/protocol";
import type { HeartbeatMessage } from "@ic/protocol";
import { emptyState } from "@ic/protocol";
import { Membership } from "./membership.ts";
import { AgentStream } from "./stream.ts";

const log = createLogger({ enabled: false });

function hb(peer: string, startedAt = 1): HeartbeatMessage {
  return {
    peer_key: peer,
    name: peer,
    host: "127.0.0.1",
    api_url: "",
    started_at: startedAt,
    session_id: null,
    master_peer_key: null,
    is_master: false,
    last_index: 0,
    telemetry: null,
    links: [],
    runners: [],
    health: [],
    sent_at: 0,
  };
}

/** A membership whose nodePing requests answer with `answers` in turn (an Error: the request fails). */
function membership(answers: ({ peer_key: string; started_at: number } | Error)[] = []) {
  const clock = new FakeClock(1_000);
  const stream = new AgentStream();
  const asked: string[] = [];
  const bus = {
    origin: "self-conn",
    request: (_name: string, _msg: unknown, opts: { suffix?: string }) => {
      asked.push(opts.suffix ?? "");
      const a = answers.shift() ?? new Error("503 no responders");
      return a instanceof Error ? Promise.reject(a) : Promise.resolve(a);
    },
  };
  const m = new Membership({
    selfKey: "p-self",
    bus: bus as never,
    clock,
    livenessTimeoutMs: 3000,
    probe: { tries: 3, timeoutMs: 10, gapMs: 0 },
    log,
    stream,
  });
  return { m, clock, asked, stream };
}

describe("Membership", () => {
  it("pins a peer to the connection of its first heartbeat and refuses another one", () => {
    const { m } = membership();
    expect(m.heard(hb("p-a"), "conn-a")?.known).toBeUndefined();
    expect(m.heard(hb("p-a"), "conn-b")).toBeUndefined();
    expect(m.heard(hb("p-a"), undefined)).toBeUndefined();
    expect(m.heard(hb("p-a"), "conn-a")?.known?.origin).toBe("conn-a");
    expect(m.originOf("p-a")).toBe("conn-a");
    expect(m.originOf("p-self")).toBe("self-conn");
  });

  it.each([
    ["heard just now", 0, undefined, true],
    ["heard at the liveness timeout", 3000, undefined, true],
    ["silent past the timeout", 3001, undefined, false],
    ["marked gone", 0, "lost", false],
  ] as const)("a peer %s is live: %s", (_, silentMs, mark, live) => {
    const { m, clock } = membership();
    m.heard(hb("p-a"), "conn-a");
    if (mark) m.markLost("p-a");
    clock.set(clock.now() + silentMs);
    expect(m.live().map((p) => p.heartbeat.peer_key)).toEqual(live ? ["p-a"] : []);
  });

  it.each([
    ["another peer", "p-a", false],
    ["no peer", undefined, true],
    ["this node itself", "p-self", true],
  ] as const)(
    "an applied NodeLeft that took out %s marks it gone: live after %s",
    (_, left, live) => {
      const { m, stream } = membership();
      m.heard(hb("p-a"), "conn-a");
      m.heard(hb("p-self"), "conn-self");
      const ev = {
        index: 2,
        session_id: "s-1",
        at: 0,
        event: { type: "NodeLeft", node_id: "n", reason: "x" },
      };
      stream.publish("applied", { ev: ev as never, state: emptyState(), left });
      expect(m.live().some((p) => p.heartbeat.peer_key === (left ?? "p-a"))).toBe(live);
    },
  );

  it("a peer heard again after it was marked gone is live again; a long-silent one is forgotten", () => {
    const { m, clock } = membership();
    m.heard(hb("p-a"), "conn-a");
    m.markLost("p-a");
    expect(m.heardPeers()[0]!.lastHeard).toBe(Number.NEGATIVE_INFINITY);
    m.heard(hb("p-a"), "conn-a");
    expect(m.live()).toHaveLength(1);
    clock.set(clock.now() + 30_001);
    m.forgetSilent(clock.now());
    expect(m.has("p-a")).toBe(false);
  });

  it("a session announcement counts as the master's heartbeat, only for a peer heard before", () => {
    const { m } = membership();
    expect(m.announcedMaster("p-a", null)).toBe(false);
    m.heard(hb("p-a"), "conn-a");
    expect(m.announcedMaster("p-a", "s-1" as never)).toBe(true);
    expect(m.heardPeers()).toMatchObject([{ peer_key: "p-a", masterOf: "s-1", session: "s-1" }]);
  });

  it.each([
    ["the same process answers", [{ peer_key: "p-a", started_at: 1 }], false, 1],
    ["no probe is answered", [], true, 3],
    [
      "another process of that peer answers",
      [
        { peer_key: "p-a", started_at: 2 },
        { peer_key: "p-a", started_at: 2 },
        { peer_key: "p-a", started_at: 2 },
      ],
      true,
      3,
    ],
    [
      "the second probe reaches it",
      [new Error("timeout"), { peer_key: "p-a", started_at: 1 }],
      false,
      2,
    ],
  ] as const)("after a dropped connection, when %s, gone: %s", async (_, answers, gone, probes) => {
    const { m, asked } = membership([...answers]);
    m.heard(hb("p-a"), "conn-a");
    expect(await m.connectionLost("p-a", 1, "watch", () => false)).toBe(gone);
    expect(asked).toEqual(Array(probes).fill("p-a"));
    expect(m.live().length).toBe(gone ? 0 : 1);
  });

  it("probes nobody for itself, an unknown peer, another process's drop, or once stopped", async () => {
    const { m, asked } = membership();
    m.heard(hb("p-a"), "conn-a");
    expect(await m.connectionLost("p-self", undefined, "watch", () => false)).toBe(false);
    expect(await m.connectionLost("p-b", undefined, "watch", () => false)).toBe(false);
    expect(await m.connectionLost("p-a", 7, "watch", () => false)).toBe(false);
    expect(await m.connectionLost("p-a", 1, "watch", () => true)).toBe(false);
    expect(asked).toEqual([]);
  });
});
