import { describe, expect, it } from "vitest";
import { SHAREGPT, sessions } from "./shapes.ts";
import type { ShapeParams } from "./shapes.ts";
import { summarizeRun } from "./summary.ts";
import type { Sample } from "./load.ts";

const params = (seed: number): ShapeParams => ({
  seed,
  charsPerToken: 1,
  sharegpt: { requests: 2000, scale: 1 },
  sharedPrefix: {
    groups: 4,
    promptsPerGroup: 5,
    systemTokens: 300,
    questionTokens: 20,
    outputTokens: 8,
  },
  multiTurn: { conversations: 3, turns: 4, firstTokens: 200, followTokens: 10, outputTokens: 8 },
  agent: { sessions: 3, turns: 5, prefixTokens: 500, turnTokens: 12, outputTokens: 6 },
});

describe("workload shapes", () => {
  it("sharegpt: lengths whose means are the paper's (within 10%), capped", () => {
    const all = sessions("sharegpt", params(1));
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const input = all.map((s) => s.turns[0]!.user.length);
    const output = all.map((s) => s.turns[0]!.maxTokens);
    expect(mean(input) / SHAREGPT.inputMean).toBeGreaterThan(0.9);
    expect(mean(input) / SHAREGPT.inputMean).toBeLessThan(1.1);
    expect(mean(output) / SHAREGPT.outputMean).toBeGreaterThan(0.9);
    expect(mean(output) / SHAREGPT.outputMean).toBeLessThan(1.1);
    expect(Math.max(...output)).toBeLessThanOrEqual(SHAREGPT.maxOutput);
  });

  it("shared-prefix: groups x prompts, each group's system prompt shared, questions its own", () => {
    const all = sessions("shared-prefix", params(1));
    expect(all).toHaveLength(20);
    expect(new Set(all.map((s) => s.system)).size).toBe(4);
    expect(new Set(all.map((s) => s.turns[0]!.user)).size).toBe(20);
    expect(all[0]!.system!.length).toBeGreaterThanOrEqual(300);
  });

  it("multi-turn and agent: sessions of several turns; the agent's prefix is one for all", () => {
    const mt = sessions("multi-turn", params(1));
    expect(mt.map((s) => s.turns.length)).toEqual([4, 4, 4]);
    expect(mt[0]!.turns[0]!.user.length).toBeGreaterThan(200);
    const ag = sessions("agent", params(1));
    expect(new Set(ag.map((s) => s.system)).size).toBe(1);
    expect(ag[0]!.system!.length).toBeGreaterThan(500);
  });

  it("the same seed gives the same prompts; another seed, others", () => {
    expect(sessions("multi-turn", params(3))).toEqual(sessions("multi-turn", params(3)));
    const a = sessions("shared-prefix", params(3))[0]!.system!;
    const b = sessions("shared-prefix", params(4))[0]!.system!;
    expect(a.slice(10, 60)).not.toBe(b.slice(10, 60));
  });
});

describe("summarizeRun", () => {
  const s = (ttftMs: number, e2eMs: number, tokens: number, cached = 0, prompt = 100): Sample => ({
    session: 0,
    turn: 0,
    sentMs: 0,
    ttftMs,
    itlMs: Array.from({ length: Math.max(0, tokens - 1) }, () => (e2eMs - ttftMs) / (tokens - 1)),
    e2eMs,
    tokens,
    cachedTokens: cached,
    promptTokens: prompt,
    instance: "i",
  });

  it("goodput counts the requests meeting both the TTFT and the time-per-token SLO", () => {
    const samples = [
      s(100, 1100, 11, 50), // tpot 100: met
      s(600, 1600, 11, 100), // ttft over
      s(100, 3100, 11, 0), // tpot 300: over
      { ...s(50, 60, 2), error: "boom" },
    ];
    const r = summarizeRun(samples, 2, { ttftMs: 500, tpotMs: 150 });
    expect(r).toMatchObject({ requests: 4, errors: 1, goodput: 0.5, sloMet: 0.25 });
    expect(r.cacheHitRate).toBeCloseTo(150 / 300);
    expect(r.tokensPerS).toBe(33 / 2);
    expect(r.ttftP50).toBe(100);
    expect(r.ttftP99).toBe(600);
  });
});
