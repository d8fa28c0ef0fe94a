import { describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import { DEFAULT_CHAT_LIMITS } from "./request.ts";
import type {
  ClusterView,
  ControlState,
  KvRestoreRequest,
  KvSaved,
  KvSaveRequest,
} from "@ic/protocol";
import { livePeer } from "../testing/views.ts";
import { chainHashes } from "../prompt-blocks.ts";
import { PromptCacheMap } from "../prompt-cache.ts";
import { KvMoveStats } from "./handover.ts";
import type { KvMovePort } from "./handover.ts";
import { handOffWarm } from "./warm-handoff.ts";

/** Instances of one model, each with rank 0 ready on the peer named. */
function state(instances: Record<string, string>): ControlState {
  const s = { instances: {}, runners: {}, deployments: {} } as unknown as ControlState;
  let age = 0;
  for (const [id, peer] of Object.entries(instances)) {
    (s.instances as Record<string, unknown>)[id] = {
      instance_id: id,
      model_id: "m/x",
      created_at: age++,
      assignments: [{ rank: 0, peer_key: peer, node_id: `n-${peer}` }],
    };
    (s.runners as Record<string, unknown>)[`${id}/0`] = {
      state: "RunnerReady",
      endpoint: `http://${peer}`,
    };
  }
  return s;
}

const peer = (key: string, draining = false) => livePeer(key, { draining, moves: true });

const saved = (seed: number): KvSaved => ({
  file: `kv-${String(seed).padStart(32, "0")}.bin`,
  bytes: 1000,
  sha256: "a".repeat(64),
  tokens: 500,
  api_url: "https://self:8080",
  shape: { model_id: "m/x" as never, model_bytes: 1, slot_ctx: 4096, engine_flags: "b".repeat(64) },
  save_ms: 1,
});

/** A port whose save finds the slots of `inSlots` (by seed) and whose targets have `slots` each. */
function port(inSlots: number[], slots = 2) {
  const asked: string[] = [];
  const p: KvMovePort = {
    save: async (peerKey, req: KvSaveRequest) => {
      asked.push(`save ${peerKey} ${req.seed}`);
      return inSlots.includes(req.seed)
        ? { ok: true, saved: saved(req.seed) }
        : { ok: false, error: { code: "not_found", message: `no slot served seed ${req.seed}` } };
    },
    restore: async (peerKey, req: KvRestoreRequest) => {
      asked.push(`restore ${peerKey} ${req.instance_id}`);
      return {
        ok: true,
        restored: { slot: 0, slots, tokens: 500, fetch_ms: 1, restore_ms: 1 },
      };
    },
  };
  return { p, asked };
}

function setup(o: { inSlots: number[]; slots?: number; budget?: number }) {
  const cache = new PromptCacheMap({ blockChars: 4 });
  // Four conversations on the source, the newest last (seed = its number).
  for (const k of [1, 2, 3, 4])
    cache.record("src", { hashes: chainHashes(`c${k}`.repeat(6), 4), chars: 12 }, k);
  const cluster = {
    peerKey: "p1",
    snapshot: () => state({ src: "p1", a: "p2", b: "p3" }),
    livePeers: () => [peer("p1", true), peer("p2"), peer("p3")],
  } as unknown as ClusterView;
  const stats = new KvMoveStats();
  const { p, asked } = port(o.inSlots, o.slots);
  const limits = {
    ...DEFAULT_CHAT_LIMITS,
    ...(o.budget === undefined ? {} : { kv_move_drain_budget_bytes: o.budget }),
  };
  const run = (deadline = Date.now() + 5000) =>
    handOffWarm({ cluster, port: p, cache, stats, limits, log: silentLogger() }, deadline);
  return { run, asked, cache, stats };
}

describe("handOffWarm", () => {
  it("moves the newest conversations round robin, as many per target as its engine has slots", async () => {
    const { run, asked, cache, stats } = setup({ inSlots: [1, 2, 3, 4], slots: 1 });
    expect(await run()).toEqual({ moved: 2, failed: 0 });
    expect(asked).toEqual(["save p1 4", "restore p2 a", "save p1 3", "restore p3 b"]);
    // The routers know where they went.
    expect(cache.warmest("a").map((w) => w.seed)).toEqual([4]);
    expect(cache.warmest("b").map((w) => w.seed)).toEqual([3]);
    expect(stats.totals.get("m/x")).toEqual({ moves: 2, failed: 0 });
  });

  it("skips a conversation no slot holds any more, and goes on with the next", async () => {
    const { run, asked } = setup({ inSlots: [4, 2], slots: 2 });
    expect(await run()).toEqual({ moved: 2, failed: 2 });
    expect(asked.filter((a) => a.startsWith("save"))).toEqual([
      "save p1 4",
      "save p1 3",
      "save p1 2",
      "save p1 1",
    ]);
  });

  it("stops at the drain's byte budget and at its deadline", async () => {
    const budget = setup({ inSlots: [1, 2, 3, 4], budget: 2500 });
    expect(await budget.run()).toEqual({ moved: 2, failed: 1 });
    const late = setup({ inSlots: [1, 2, 3, 4] });
    expect(await late.run(Date.now() - 1)).toEqual({ moved: 0, failed: 0 });
    expect(late.asked).toEqual([]);
  });

  it("moves nothing with chat.kv_move off", async () => {
    const { asked } = setup({ inSlots: [1] });
    const off = new PromptCacheMap();
    const r = await handOffWarm(
      {
        cluster: { peerKey: "p1", snapshot: () => state({}), livePeers: () => [] } as never,
        port: port([]).p,
        cache: off,
        stats: new KvMoveStats(),
        limits: { ...DEFAULT_CHAT_LIMITS, kv_move: false },
        log: silentLogger(),
      },
      Date.now() + 1000,
    );
    expect(r).toEqual({ moved: 0, failed: 0 });
    expect(asked).toEqual([]);
  });
});
