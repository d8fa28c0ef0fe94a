import { describe, expect, it } from "vitest";
import { median, RttWindows } from "./links.ts";

describe("median", () => {
  it.each([
    [[1], 1],
    [[3, 1, 2], 2],
    [[4, 1, 3, 2], 2.5],
    [[0.3, 0.31, 9, 0.29, 0.3], 0.3],
  ])("%j -> %d", (xs, want) => expect(median(xs)).toBe(want));
});

describe("RttWindows", () => {
  const m = (...e: [string, number][]) => new Map(e);

  it("a late answer does not move the link; a lasting change does within a few rounds", () => {
    const w = new RttWindows();
    const rounds = [0.3, 0.31, 0.29, 6.5, 0.3, 0.3, 4, 4, 4, 4].map(
      (rtt) => w.update(m(["p-b", rtt]))[0]!.rtt_ms,
    );
    // Even-sized windows average their middle two; the lasting 4 ms wins its window's majority.
    expect(rounds).toEqual([0.3, 0.31, 0.3, 0.31, 0.3, 0.3, 0.3, 4, 4, 4]);
  });

  it("a peer that did not answer is dropped with its history", () => {
    const w = new RttWindows();
    w.update(m(["p-b", 5], ["p-c", 1]));
    w.update(m(["p-b", 5], ["p-c", 1]));
    expect(w.update(m(["p-c", 1]))).toEqual([{ peer_key: "p-c", rtt_ms: 1 }]);
    expect(w.update(m(["p-b", 0.5], ["p-c", 1]))).toEqual([
      { peer_key: "p-b", rtt_ms: 0.5 },
      { peer_key: "p-c", rtt_ms: 1 },
    ]);
  });
});
