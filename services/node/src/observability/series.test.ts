import { describe, expect, it } from "vitest";
import { percentile, SeriesRecorder } from "./series.ts";

describe("percentile", () => {
  it.each([
    [[], 50, null],
    [[7], 95, 7],
    [[1, 2, 3, 4], 50, 2],
    [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 95, 10],
    [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 50, 5],
  ])("%j p%d = %j", (values, p, want) => {
    expect(percentile(values, p)).toBe(want);
  });
});

describe("SeriesRecorder", () => {
  it("closes each interval into requests by status class, tokens per second and TTFT percentiles", () => {
    const r = new SeriesRecorder(10_000, 0);
    r.record({ status: 200, ttftMs: 30, completionTokens: 40 });
    r.record({ status: 200, ttftMs: 10, completionTokens: 60 });
    r.record({ status: 429 });
    r.record({ status: 503 });
    const mem = [{ node: "node-1", used_bytes: 5, total_bytes: 10 }];
    expect(r.sample(10_000, mem)).toEqual({
      t: 10_000,
      requests: { ok: 2, client_error: 1, server_error: 1 },
      tokens_per_s: 10,
      ttft_p50_ms: 10,
      ttft_p95_ms: 30,
      memory: mem,
    });
    // The next interval starts empty.
    expect(r.sample(20_000, [])).toMatchObject({
      requests: { ok: 0, client_error: 0, server_error: 0 },
      tokens_per_s: 0,
      ttft_p50_ms: null,
    });
  });

  it("keeps the last hour only", () => {
    const r = new SeriesRecorder(60_000, 0);
    for (let i = 1; i <= 75; i++) r.sample(i * 60_000, []);
    const s = r.samples();
    expect(s).toHaveLength(60);
    expect(s[0]!.t).toBe(16 * 60_000);
    expect(s.at(-1)!.t).toBe(75 * 60_000);
  });

  it("bounds the TTFTs it keeps per interval (reservoir), and the percentiles stay close", () => {
    let seed = 1;
    const r = new SeriesRecorder(1000, 0, () => (seed = (seed * 16807) % 2147483647) / 2147483647);
    for (let i = 1; i <= 10_000; i++) r.record({ status: 200, ttftMs: i });
    const s = r.sample(1000, []);
    expect(s.ttft_p50_ms!).toBeGreaterThan(4000);
    expect(s.ttft_p50_ms!).toBeLessThan(6000);
    expect(s.ttft_p95_ms!).toBeGreaterThan(9000);
  });
});
