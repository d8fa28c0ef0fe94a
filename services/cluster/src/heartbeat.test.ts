import { describe, expect, it } from "vitest";
import type { HealthEntry, SessionId } from "@ic/protocol";
import { behindMaster, heartbeatOf } from "./heartbeat.ts";

const S1 = "s-1" as SessionId;
const master = { peer_key: "p-m", started_at: 1 };
const self = { peerKey: "p-self", name: "a", host: "10.0.0.1", apiUrl: "http://a", startedAt: 5 };
const extras = { telemetry: null, links: [], runners: [], health: [] };

describe("heartbeatOf", () => {
  it("says the session, the master and the replica's index, with the worker's parts", () => {
    const hb = heartbeatOf({
      self,
      extras,
      current: { session_id: S1, master },
      isMaster: false,
      lastIndex: 7,
      now: 99,
      intentHealth: undefined,
    });
    expect(hb).toMatchObject({
      peer_key: "p-self",
      session_id: S1,
      master_peer_key: "p-m",
      is_master: false,
      last_index: 7,
      sent_at: 99,
      health: [],
    });
  });

  it("adds the intent store's health to the node's own; none before a session", () => {
    const failing = { code: "intent_store_failing" } as unknown as HealthEntry;
    const own = { code: "disk_low" } as unknown as HealthEntry;
    const hb = heartbeatOf({
      self,
      extras: { ...extras, health: [own] },
      current: null,
      isMaster: true,
      lastIndex: 0,
      now: 1,
      intentHealth: failing,
    });
    expect(hb.health).toEqual([own, failing]);
    expect(hb.session_id).toBeNull();
    expect(hb.master_peer_key).toBeNull();
  });
});

describe("behindMaster", () => {
  const follower = { current: { session_id: S1, master }, isMaster: false, synced: true, index: 4 };
  const hb = { is_master: true, peer_key: "p-m", session_id: S1, last_index: 5 };
  it.each([
    ["its master is further", hb, follower, true],
    ["its master is where it is", { ...hb, last_index: 4 }, follower, false],
    ["another master", { ...hb, peer_key: "p-x" }, follower, false],
    ["another session", { ...hb, session_id: "s-2" as SessionId }, follower, false],
    ["a heartbeat that is not a master's", { ...hb, is_master: false }, follower, false],
    ["a replica still syncing (it asks anyway)", hb, { ...follower, synced: false }, false],
    ["this node is the master", hb, { ...follower, isMaster: true }, false],
    ["no session", hb, { ...follower, current: null }, false],
  ] as const)("%s", (_name, h, f, want) => {
    expect(behindMaster(h, f)).toBe(want);
  });
});
