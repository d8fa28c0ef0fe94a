import { describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import { emptyState } from "@ic/protocol";
import type { ControlState } from "@ic/protocol";
import { Drain, engineBusy, nodeDrain } from "./drain.ts";

function drain(
  counts: number[],
  o: {
    instances?: boolean;
    timeoutMs?: number;
    handOff?: (deadline: number) => Promise<unknown>;
  } = {},
) {
  const seen: string[] = [];
  let i = 0;
  const d = new Drain({
    announce: () => void seen.push("announce"),
    hasInstances: () => o.instances ?? true,
    busy: async () => {
      seen.push("busy");
      return counts[Math.min(i++, counts.length - 1)]!;
    },
    settleMs: 20,
    pollMs: 10,
    timeoutMs: o.timeoutMs ?? 5000,
    ...(o.handOff ? { handOff: o.handOff } : {}),
    log: silentLogger(),
  });
  return { d, seen };
}

describe("Drain", () => {
  it("announces, lets gateways hear it, then waits until the engines hold nothing", async () => {
    const { d, seen } = drain([2, 1, 0]);
    const t0 = Date.now();
    const r = await d.run();
    expect(r).toMatchObject({ outcome: "idle", left: 0 });
    expect(seen).toEqual(["announce", "busy", "busy", "busy"]);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(20 + 2 * 10 - 5);
    // Once: a second run is the same drain.
    expect(await d.run()).toBe(r);
  });

  it("has nothing to wait for without instances (it still announces)", async () => {
    const { d, seen } = drain([5], { instances: false });
    expect(await d.run()).toMatchObject({ outcome: "nothing_to_drain", waitedMs: 0 });
    expect(seen).toEqual(["announce"]);
  });

  it("stops waiting at the timeout, saying how many were left", async () => {
    const { d } = drain([3], { timeoutMs: 80 });
    const r = await d.run();
    expect(r).toMatchObject({ outcome: "timeout", left: 3 });
    expect(r.waitedMs).toBeGreaterThanOrEqual(75);
    expect(r.waitedMs).toBeLessThan(1000);
  });

  it("a second signal cuts it short", async () => {
    const { d } = drain([4]);
    const p = d.run();
    setTimeout(() => d.cancel(), 50);
    const r = await p;
    expect(r.outcome).toBe("cut_short");
    expect(r.waitedMs).toBeLessThan(1000);
  });
});

describe("Drain: the hand-off before it stops", () => {
  it("runs once nothing is in flight, with the drain's deadline, and the drain waits for it", async () => {
    const calls: number[] = [];
    const t0 = Date.now();
    const { d, seen } = drain([1, 0], {
      handOff: async (deadline) => {
        calls.push(deadline);
        seen.push("hand-off");
        await new Promise((r) => setTimeout(r, 30));
      },
    });
    const r = await d.run();
    expect(r.outcome).toBe("idle");
    expect(seen).toEqual(["announce", "busy", "busy", "hand-off"]);
    expect(calls[0]).toBeGreaterThanOrEqual(t0 + 5000);
    expect(r.waitedMs).toBeGreaterThanOrEqual(30);
  });

  it("is not run when the drain times out, and one that outlasts the deadline is left behind", async () => {
    let ran = false;
    const timedOut = drain([3], { timeoutMs: 60, handOff: async () => void (ran = true) });
    expect((await timedOut.d.run()).outcome).toBe("timeout");
    expect(ran).toBe(false);
    const slow = drain([0], { timeoutMs: 100, handOff: () => new Promise(() => {}) });
    const r = await slow.d.run();
    expect(r.outcome).toBe("idle");
    expect(r.waitedMs).toBeLessThan(1000);
  });

  it("a hand-off that fails does not fail the drain; a second signal cuts it short", async () => {
    const failing = drain([0], { handOff: () => Promise.reject(new Error("no responders")) });
    expect((await failing.d.run()).outcome).toBe("idle");
    const hanging = drain([0], { handOff: () => new Promise(() => {}) });
    const p = hanging.d.run();
    setTimeout(() => hanging.d.cancel(), 80);
    expect((await p).waitedMs).toBeLessThan(1000);
  });
});

/** A node ("me") whose one deployment runs here; `others` are the session's other members. */
function holderDrain(others: string[]) {
  const member = (peer_key: string) => ({
    node_id: `n-${peer_key}`,
    peer_key,
    name: peer_key,
    api_url: "",
    host: peer_key,
    started_at: 0,
    joined_at: 0,
  });
  const state = {
    ...emptyState(),
    members: Object.fromEntries(["me", ...others].map((k) => [`n-${k}`, member(k)])),
    instances: { i1: { instance_id: "i1", assignments: [{ peer_key: "me", rank: 0 }] } },
    deployments: { d1: { deployment_id: "d1", instance_id: "i1", model_id: "m" } },
  } as unknown as ControlState;
  return nodeDrain({
    peerKey: "me",
    agent: { snapshot: () => state, publishHeartbeat: () => {} },
    relaying: () => [],
    engineHeaders: () => ({}),
    timeoutMs: 10_000,
    log: silentLogger(),
  });
}

describe("nodeDrain: a deployment that stays", () => {
  it("a node alone in its session does not wait for a move no node can make", async () => {
    const t0 = Date.now();
    expect(await holderDrain([]).run()).toMatchObject({ outcome: "idle", left: 0 });
    expect(Date.now() - t0).toBeLessThan(2500);
  });

  it("with another member, the master gets its moment to place the deployment there", async () => {
    const d = holderDrain(["other"]);
    const first = await Promise.race([
      d.run().then(() => "ended"),
      new Promise((r) => setTimeout(() => r("waiting"), 1500)),
    ]);
    expect(first).toBe("waiting");
    d.cancel();
    expect((await d.run()).outcome).toBe("cut_short");
  });
});

describe("engineBusy", () => {
  it("adds llama-server's processing and deferred requests", () => {
    const text = [
      "# HELP llamacpp:requests_processing Number of requests processing.",
      "# TYPE llamacpp:requests_processing gauge",
      "llamacpp:requests_processing 2",
      "llamacpp:requests_deferred 3",
      "llamacpp:prompt_tokens_total 40",
    ].join("\n");
    expect(engineBusy(text)).toBe(5);
    expect(engineBusy("")).toBe(0);
    expect(engineBusy('llamacpp:requests_processing{slot="0"} 1\n')).toBe(1);
  });
});
