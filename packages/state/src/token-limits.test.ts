import { describe, expect, it } from "vitest";
import type { TokenLimits } from "@ic/protocol";
import { checkTokenLimits, LIMIT_WINDOW_MS, TokenWindows } from "./token-limits.ts";

const T0 = 1_000_000; // a whole second

describe("TokenWindows", () => {
  it("counts requests and tokens per name over the last minute, to the second", () => {
    const w = new TokenWindows();
    w.request("a", T0);
    w.request("a", T0 + 400);
    w.used("a", 30, T0 + 900);
    w.request("b", T0 + 10);
    expect(w.totals("a", T0 + 1000)).toEqual({ requests: 2, tokens: 30 });
    expect(w.totals("b", T0 + 1000)).toEqual({ requests: 1, tokens: 0 });
    expect(w.totals("nobody", T0)).toEqual({ requests: 0, tokens: 0 });
    // The second [T0, T0+1000) leaves the window once all of it is older than a minute.
    expect(w.totals("a", T0 + LIMIT_WINDOW_MS + 999)).toEqual({ requests: 2, tokens: 30 });
    expect(w.totals("a", T0 + LIMIT_WINDOW_MS + 1000)).toEqual({ requests: 0, tokens: 0 });
  });

  it("drops an empty window, and keeps at most its bound of names (the oldest goes)", () => {
    const w = new TokenWindows(2);
    w.request("a", T0);
    w.request("b", T0);
    w.request("c", T0);
    expect(w.size).toBe(2);
    expect(w.totals("a", T0).requests).toBe(0);
    expect(w.totals("c", T0).requests).toBe(1);
    w.totals("b", T0 + 2 * LIMIT_WINDOW_MS);
    w.totals("c", T0 + 2 * LIMIT_WINDOW_MS);
    expect(w.size).toBe(0);
  });

  it("ignores zero tokens (a request the engine reported nothing for)", () => {
    const w = new TokenWindows();
    w.used("a", 0, T0);
    expect(w.size).toBe(0);
  });

  it.each([
    // [requests at (s after T0)], limit, now (s after T0), expected seconds
    { at: [0, 10, 20], limit: 3, now: 30, want: 31 }, // the request of second 0 leaves at 61
    { at: [0, 10, 20], limit: 2, now: 30, want: 41 }, // two must leave: the second one at 71
    { at: [0, 0, 20], limit: 3, now: 30, want: 31 }, // one bucket holds two
    { at: [0, 10, 20], limit: 4, now: 30, want: 1 }, // under the limit: at least 1
    { at: [0], limit: 1, now: 60.5, want: 1 }, // leaves in half a second: rounded up to 1
  ])(
    "seconds until under the limit: $at, limit $limit at $now s -> $want s",
    ({ at, limit, now, want }) => {
      const w = new TokenWindows();
      for (const s of at) w.request("a", T0 + s * 1000);
      expect(w.secondsUntilBelow("a", "requests", limit, T0 + now * 1000)).toBe(want);
    },
  );
});

describe("checkTokenLimits", () => {
  const after = () => 42;
  it.each<{
    name: string;
    limits: TokenLimits;
    use: [number, number, number];
    want: string | null;
  }>([
    { name: "no limits", limits: {}, use: [1000, 1e9, 1000], want: null },
    {
      name: "under every limit",
      limits: { requests_per_minute: 10, tokens_per_minute: 100, concurrent_requests: 2 },
      use: [9, 99, 1],
      want: null,
    },
    {
      name: "requests at the limit",
      limits: { requests_per_minute: 10 },
      use: [10, 0, 0],
      want: "requests_per_minute",
    },
    {
      name: "tokens at the limit",
      limits: { tokens_per_minute: 100 },
      use: [0, 100, 0],
      want: "tokens_per_minute",
    },
    {
      name: "concurrency at the limit",
      limits: { concurrent_requests: 2 },
      use: [0, 0, 2],
      want: "concurrent_requests",
    },
    {
      name: "several reached: concurrency first",
      limits: { requests_per_minute: 1, tokens_per_minute: 1, concurrent_requests: 1 },
      use: [5, 5, 5],
      want: "concurrent_requests",
    },
    {
      name: "requests before tokens",
      limits: { requests_per_minute: 1, tokens_per_minute: 1 },
      use: [5, 5, 0],
      want: "requests_per_minute",
    },
  ])("$name", ({ limits, use, want }) => {
    const [requests, tokens, open] = use;
    const err = checkTokenLimits("t", limits, { requests, tokens, open }, after);
    if (want === null) {
      expect(err).toBeUndefined();
      return;
    }
    expect(err?.code).toBe("rate_limited");
    expect(err?.retryable).toBe(true);
    expect(err?.details).toMatchObject({ token: "t", limit: want });
    expect(err?.retryAfterS).toBe(want === "concurrent_requests" ? 1 : 42);
    expect(err?.message).toMatch(/^token "t" reached its limit of \d+ /);
  });
});
