import { describe, expect, it } from "vitest";
import { emptyState } from "@ic/protocol";
import type { ControlState, Heartbeat, InstanceId, ModelId, NodeId, SessionId } from "@ic/protocol";
import { nodeIdFor } from "@ic/state";
import type { PeerView } from "./membership.ts";
import { sessionStarted, successor } from "./session-start.ts";

const NOW = 1_000_000;
const NEW = "s-new" as SessionId;
const OLD = "s-old" as SessionId;

function hb(peer: string, over: Partial<Heartbeat> = {}): Heartbeat {
  return {
    peer_key: peer,
    name: peer,
    host: "127.0.0.1",
    api_url: `http://${peer}`,
    started_at: 1,
    session_id: OLD,
    master_peer_key: "p-old-master",
    is_master: false,
    last_index: 5,
    telemetry: null,
    links: [],
    runners: [],
    health: [],
    sent_at: NOW,
    ...over,
  };
}

const view = (peer: string, heardMsAgo = 0, over: Partial<PeerView> = {}): PeerView => ({
  heartbeat: hb(peer),
  lastHeard: NOW - heardMsAgo,
  origin: `conn-${peer}`,
  ...over,
});

/** The old session's replica: instance i-<n> has ranks on the given peers, each with a runner. */
function oldState(instances: Readonly<Record<string, readonly string[]>>): ControlState {
  const s = emptyState();
  for (const [id, peers] of Object.entries(instances)) {
    s.instances[id] = {
      instance_id: id as InstanceId,
      model_id: "acme/m" as ModelId,
      sharding: "Pipeline",
      created_at: 1,
      assignments: peers.map((p, rank) => ({
        node_id: nodeIdFor(OLD, p),
        peer_key: p,
        rank,
        layers: 1,
        weight_bytes: 1,
        required_bytes: 1,
      })),
    };
    peers.forEach((p, rank) => {
      s.runners[`${id}/${rank}`] = {
        instance_id: id as InstanceId,
        node_id: nodeIdFor(OLD, p),
        rank,
        state: "RunnerReady",
        restarts: 0,
        since: 0,
      };
    });
  }
  return s;
}

describe("sessionStarted", () => {
  it.each([
    ["every rank on a member", { a: ["p-self", "p-b"] }, ["p-b"], undefined, ["a"]],
    ["a rank on a silent node", { a: ["p-self", "p-gone"] }, ["p-b"], undefined, []],
    ["a single rank on this node", { a: ["p-self"] }, [], undefined, ["a"]],
    ["a rank on the deposed master", { a: ["p-self", "p-m"] }, ["p-m"], "p-m", []],
    ["two instances, one survives", { a: ["p-b"], b: ["p-gone"] }, ["p-b"], undefined, ["a"]],
  ] as const)("%s: carries %j", (_, instances, live, deposed, carried) => {
    const ev = sessionStarted({
      sessionId: NEW,
      now: NOW,
      self: hb("p-self"),
      // The deposed master was last heard the election timeout ago.
      live: live.map((p) => view(p, p === deposed ? 3000 : 0)),
      deposed,
      electionTimeoutMs: 3000,
      old: oldState(instances),
      intentRestored: true,
    });
    expect(ev.instances.map((i) => i.instance_id).sort()).toEqual([...carried]);
    // Carried ranks and their runners name the new session's node ids.
    for (const i of ev.instances)
      for (const a of i.assignments) expect(a.node_id).toBe(nodeIdFor(NEW, a.peer_key));
    expect(ev.runners.map((r) => `${r.instance_id}/${r.rank}`).sort()).toEqual(
      ev.instances.flatMap((i) => i.assignments.map((a) => `${i.instance_id}/${a.rank}`)).sort(),
    );
    for (const r of ev.runners)
      expect(r.node_id).toBe(
        ev.instances
          .find((i) => i.instance_id === r.instance_id)!
          .assignments.find((a) => a.rank === r.rank)!.node_id,
      );
    expect(ev.members.map((m) => m.peer_key)).toEqual([
      "p-self",
      ...live.filter((p) => p !== deposed),
    ]);
  });

  it("keeps the deposed master while it was heard within the election timeout", () => {
    const ev = sessionStarted({
      sessionId: NEW,
      now: NOW,
      self: hb("p-self"),
      live: [view("p-m", 2999)],
      deposed: "p-m",
      electionTimeoutMs: 3000,
      old: emptyState(),
      intentRestored: false,
    });
    expect(ev.members.map((m) => m.peer_key)).toEqual(["p-self", "p-m"]);
    expect(ev.session).toMatchObject({
      session_id: NEW,
      master_peer_key: "p-self",
      master_node_id: nodeIdFor(NEW, "p-self"),
      started_at: NOW,
    });
    expect(ev.intent_restored).toBe(false);
  });
});

describe("successor", () => {
  const member = (peer: string, startedAt = 1) => ({
    node_id: nodeIdFor(OLD, peer) as NodeId,
    peer_key: peer,
    name: peer,
    api_url: "",
    host: "127.0.0.1",
    started_at: startedAt,
    joined_at: 0,
  });
  const state = (...peers: string[]): ControlState => {
    const s = emptyState();
    for (const p of peers) s.members[nodeIdFor(OLD, p)] = member(p, p === "p-young" ? 9 : 1);
    return s;
  };
  it.each([
    ["the most senior live member", { "p-b": view("p-b"), "p-young": view("p-young") }, "p-b"],
    ["none but itself", {}, undefined],
    [
      "a silent member is skipped",
      { "p-b": view("p-b", 3001), "p-young": view("p-young") },
      "p-young",
    ],
    [
      "a member marked gone is skipped",
      { "p-b": view("p-b", 0, { lostAt: NOW }), "p-young": view("p-young") },
      "p-young",
    ],
    [
      "a draining member is skipped",
      {
        "p-b": { ...view("p-b"), heartbeat: hb("p-b", { draining: true }) },
        "p-young": view("p-young"),
      },
      "p-young",
    ],
    [
      "a member not in this session is skipped",
      { "p-b": { ...view("p-b"), heartbeat: hb("p-b", { session_id: "s-x" as SessionId }) } },
      undefined,
    ],
    [
      "another process of a member is skipped",
      { "p-b": { ...view("p-b"), heartbeat: hb("p-b", { started_at: 2 }) } },
      undefined,
    ],
  ] as const)("%s", (_, peers, want) => {
    const views = peers as Record<string, PeerView>;
    const young = views["p-young"];
    if (young) views["p-young"] = { ...young, heartbeat: { ...young.heartbeat, started_at: 9 } };
    const to = successor({
      state: state("p-self", "p-b", "p-young"),
      sessionId: OLD,
      selfKey: "p-self",
      peer: (k) => views[k],
      now: NOW,
      livenessTimeoutMs: 3000,
    });
    expect(to?.peer.peer_key).toBe(want);
  });
});
