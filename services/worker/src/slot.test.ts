import { describe, expect, it } from "vitest";
import type { Instance, NodeId } from "@ic/protocol";
import { applyStatus, runnerOf, slotHealth, type Slot } from "./slot.ts";

const instance = {
  instance_id: "i-1",
  model_id: "org/m",
  assignments: [],
} as unknown as Instance;
const slot = (over: Partial<Slot> = {}): Slot => ({
  key: "i-1/0",
  instance,
  rank: 0,
  abort: new AbortController(),
  state: "RunnerStaging",
  restarts: 0,
  progressReportedAt: 0,
  ...over,
});

describe("applyStatus", () => {
  it.each([
    ["a first warmup starts the clock", slot(), { state: "RunnerWarmingUp", restarts: 0 }, 50, 50],
    [
      "the same warmup keeps its clock",
      slot({ state: "RunnerWarmingUp", warmupStartedAt: 10 }),
      { state: "RunnerWarmingUp", restarts: 0 },
      50,
      10,
    ],
    [
      "a restart starts a new warmup",
      slot({ state: "RunnerWarmingUp", warmupStartedAt: 10 }),
      { state: "RunnerWarmingUp", restarts: 1 },
      50,
      50,
    ],
    [
      "a new reason starts a new warmup",
      slot({ state: "RunnerWarmingUp", warmupStartedAt: 10 }),
      { state: "RunnerWarmingUp", reason: "waiting for remote ranks", restarts: 0 },
      50,
      50,
    ],
    [
      "ready ends the warmup",
      slot({ state: "RunnerWarmingUp", warmupStartedAt: 10 }),
      { state: "RunnerReady", endpoint: "http://a:1", restarts: 0 },
      50,
      undefined,
    ],
  ] as const)("%s", (_name, s, status, now, want) => {
    applyStatus(s, status, now);
    expect(s.warmupStartedAt).toBe(want);
    expect(s.state).toBe(status.state);
  });

  it("keeps the last error until the runner is ready, the endpoint only while it is", () => {
    const s = slot({ progress: { staged_bytes: 1, total_bytes: 2, started_at: 0 } });
    applyStatus(s, { state: "RunnerWarmingUp", restarts: 1, lastError: "boom" }, 1);
    expect(s.progress).toBeUndefined();
    applyStatus(s, { state: "RunnerWarmingUp", restarts: 2, endpoint: "http://a:1" }, 2);
    expect(s.lastError).toBe("boom");
    expect(s.endpoint).toBeUndefined();
    applyStatus(s, { state: "RunnerReady", restarts: 2, endpoint: "http://a:1" }, 3);
    expect(s.lastError).toBeUndefined();
    expect(s.endpoint).toBe("http://a:1");
  });
});

describe("runnerOf", () => {
  it("reports progress only while staging and cuts the last error to 400 characters", () => {
    const progress = { staged_bytes: 1, total_bytes: 2, started_at: 0 };
    const staging = runnerOf(slot({ progress, lastError: "x".repeat(1000) }), "n-1" as NodeId, 7);
    expect(staging).toMatchObject({ node_id: "n-1", since: 7, progress });
    expect(staging.last_error).toHaveLength(400);
    const warm = runnerOf(
      slot({ state: "RunnerWarmingUp", progress, warmupStartedAt: 5 }),
      "n-1" as NodeId,
      7,
    );
    expect(warm.progress).toBeUndefined();
    expect(warm.warmup_started_at).toBe(5);
  });
});

describe("slotHealth", () => {
  it.each([
    ["a ready runner", slot({ state: "RunnerReady", restarts: 9 }), []],
    ["one restart", slot({ state: "RunnerWarmingUp", restarts: 1 }), []],
    [
      "two restarts in a row",
      slot({ state: "RunnerWarmingUp", restarts: 2 }),
      ["runner_crash_loop"],
    ],
    ["a failed runner", slot({ state: "RunnerFailed", restarts: 5 }), ["runner_failed"]],
  ] as const)("%s", (_name, s, codes) => {
    expect(slotHealth([s]).map((h) => h.code)).toEqual(codes);
  });

  it("names the model, the instance and the engine's last words", () => {
    const [h] = slotHealth([slot({ state: "RunnerFailed", restarts: 5, lastError: "no mem" })]);
    expect(h).toMatchObject({ model_id: "org/m", instance_id: "i-1", severity: "warn" });
    expect(h!.message).toContain("gave up after 5 restarts");
    expect(h!.message).toContain("no mem");
  });
});
