import { afterEach, describe, expect, it, vi } from "vitest";
import type { Instance, KvRestoreReply, KvSaved, KvSaveReply, ModelId } from "@ic/protocol";
import { livePeer, readyInstance } from "../testing/views.ts";
import {
  HANDOVER_CHECK_MS,
  HandoverWatch,
  handoverTargets,
  KvMoveStats,
  moveCache,
  requestSeed,
} from "./handover.ts";
import type { KvMovePort } from "./handover.ts";

const inst = readyInstance;
const peer = livePeer;

describe("requestSeed", () => {
  it("draws a seed for a request without one, and sends it", () => {
    const body: Record<string, unknown> = {};
    const seed = requestSeed(body);
    expect(seed).toBeTypeOf("number");
    expect(body.seed).toBe(seed);
  });
  it.each([
    { seed: 42, want: 42 },
    { seed: -1, want: undefined },
    { seed: 1.5, want: undefined },
    { seed: "7", want: undefined },
  ])("keeps the client's seed $seed (usable: $want)", ({ seed, want }) => {
    const body: Record<string, unknown> = { seed };
    expect(requestSeed(body)).toBe(want);
    expect(body.seed).toBe(seed);
  });
});

describe("handoverTargets", () => {
  const source = inst("src", ["p1"]).instance;
  const a = inst("a", ["p2"]);
  const b = inst("b", ["p3"]);
  const split = inst("s", ["p2", "p4"]);
  it.each([
    {
      what: "none while the source's node is not draining",
      live: [peer("p1", { moves: true }), peer("p2", { moves: true })],
      others: [a],
      want: [],
    },
    {
      what: "none when the source's engine cannot move caches",
      live: [peer("p1", { draining: true, moves: false }), peer("p2", { moves: true })],
      others: [a],
      want: [],
    },
    {
      what: "none from an older source node (no probe verdict)",
      live: [peer("p1", { draining: true }), peer("p2", { moves: true })],
      others: [a],
      want: [],
    },
    {
      what: "the ready instances off draining nodes whose engines move caches",
      live: [
        peer("p1", { draining: true, moves: true }),
        peer("p2", { moves: true }),
        peer("p3", { moves: false }),
      ],
      others: [a, b],
      want: ["a"],
    },
    {
      what: "not one with a rank on a draining node",
      live: [
        peer("p1", { draining: true, moves: true }),
        peer("p2", { moves: true }),
        peer("p4", { draining: true, moves: true }),
      ],
      others: [split],
      want: [],
    },
  ])("$what", ({ live, others, want }) => {
    expect(handoverTargets(source, others, live).map((i) => i.instance.instance_id)).toEqual(want);
  });
});

const saved: KvSaved = {
  file: `kv-${"a".repeat(32)}.bin`,
  bytes: 5000,
  sha256: "b".repeat(64),
  tokens: 1700,
  api_url: "https://10.0.0.3:8080",
  shape: {
    model_id: "m/x" as ModelId,
    model_bytes: 1,
    slot_ctx: 4096,
    engine_flags: "c".repeat(64),
  },
  save_ms: 3,
};

/** A port that answers as scripted and records what it was asked. */
function port(save: KvSaveReply, restore: KvRestoreReply) {
  const asked: string[] = [];
  const p: KvMovePort = {
    save: async (peerKey, req) => {
      asked.push(`save ${peerKey} ${req.instance_id} seed=${req.seed}`);
      return save;
    },
    restore: async (peerKey, req) => {
      asked.push(`restore ${peerKey} ${req.instance_id} ${req.saved.file}`);
      return restore;
    },
  };
  return { p, asked };
}

describe("moveCache", () => {
  const from = { instanceId: "src" as Instance["instance_id"], peerKey: "p1" };
  const to = inst("dst", ["p2", "p3"]);
  const restored = { slot: 1, slots: 2, tokens: 1700, fetch_ms: 4, restore_ms: 2 };
  const error = { code: "upstream_failed" as const, message: "the engine's /slots: 500" };
  const move = { from, to, seed: 9, timeoutMs: 5000, budget: 10_000 };

  it("saves on the source's node and restores on the target's rank-0 node", async () => {
    const { p, asked } = port({ ok: true, saved }, { ok: true, restored });
    const r = await moveCache(p, move);
    expect(r).toMatchObject({ ok: true, saved, restored });
    expect(asked).toEqual(["save p1 src seed=9", `restore p2 dst ${saved.file}`]);
  });
  it("reports a failed save with the node's words, and asks no restore", async () => {
    const { p, asked } = port({ ok: false, error }, { ok: true, restored });
    expect(await moveCache(p, move)).toMatchObject({
      ok: false,
      why: "save: the engine's /slots: 500",
      bytes: 0,
    });
    expect(asked).toHaveLength(1);
  });
  it("moves no file over what is left of the drain's budget", async () => {
    const { p, asked } = port({ ok: true, saved }, { ok: true, restored });
    const r = await moveCache(p, { ...move, budget: 4999 });
    expect(r.ok).toBe(false);
    expect(asked).toHaveLength(1);
  });
  it("counts the bytes of a file whose restore failed", async () => {
    const { p } = port({ ok: true, saved }, { ok: false, error });
    expect(await moveCache(p, move)).toMatchObject({ ok: false, bytes: 5000 });
  });
  it("turns a port that throws (no responder, a timeout) into a failed move", async () => {
    const p: KvMovePort = {
      save: () => Promise.reject(new Error("503 no responders")),
      restore: () => Promise.reject(new Error("unused")),
    };
    expect(await moveCache(p, move)).toMatchObject({ ok: false, why: "503 no responders" });
  });
});

describe("KvMoveStats", () => {
  const from = { peerKey: "p1" };
  const moved = {
    model: "m/x",
    outcome: "moved" as const,
    bytes: 4000,
    restoredTokens: 2000,
    prefilledTokens: 10,
    seconds: 0.1,
  };
  it("estimates the prefill spared at the target's recent rate, less the move", () => {
    const s = new KvMoveStats();
    s.notePrefill("dst", { prompt_n: 1000, prompt_ms: 1000 });
    // Under 64 tokens prefilled: not a rate.
    s.notePrefill("dst", { prompt_n: 10, prompt_ms: 1000 });
    const r = s.record(moved, from, "dst");
    expect(r.savedSeconds).toBeCloseTo(1990 / 1000 - 0.1);
    expect(s.savedSeconds).toBeCloseTo(1.89);
    expect([s.bytes, s.restoredTokens, s.prefilledTokens]).toEqual([4000, 2000, 10]);
    expect(s.totals.get("m/x")).toEqual({ moves: 1, failed: 0 });
  });
  it("adds nothing spared for a target with no measured rate, and charges the source's budget", () => {
    const s = new KvMoveStats();
    expect(s.record(moved, from, "dst").savedSeconds).toBeUndefined();
    s.record({ ...moved, outcome: "failed", bytes: 1000, restoredTokens: 0 }, from, "dst");
    expect(s.budgetLeft("p1", 10_000)).toBe(5000);
    expect(s.budgetLeft("p2", 10_000)).toBe(10_000);
    expect(s.budgetLeft("p1", 3000)).toBe(0);
    expect(s.totals.get("m/x")).toEqual({ moves: 1, failed: 1 });
    expect(s.restoredTokens).toBe(2000);
  });
});

describe("HandoverWatch", () => {
  afterEach(() => {
    vi.useRealTimers();
  });
  it("checks its streams on one timer, only while a peer drains, and stops with the last stream", () => {
    vi.useFakeTimers();
    let live = [peer("p1")];
    const watch = new HandoverWatch(() => live);
    const seen: number[] = [];
    const offA = watch.add({ check: () => seen.push(1) });
    const offB = watch.add({ check: () => seen.push(2) });
    vi.advanceTimersByTime(HANDOVER_CHECK_MS * 2);
    expect(seen).toEqual([]);
    live = [peer("p1", { draining: true })];
    vi.advanceTimersByTime(HANDOVER_CHECK_MS);
    expect(seen).toEqual([1, 2]);
    offA();
    vi.advanceTimersByTime(HANDOVER_CHECK_MS);
    expect(seen).toEqual([1, 2, 2]);
    offB();
    expect(watch.size).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });
});
