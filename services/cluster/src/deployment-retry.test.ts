import { describe, expect, it } from "vitest";
import type { NodeCapacity } from "@ic/placement";
import {
  afterAttempt,
  capacityView,
  RETRY_FIRST_MS,
  RETRY_MAX_MS,
  retryDue,
} from "./deployment-retry.ts";
import type { RetryEntry } from "./deployment-retry.ts";

const entry = (at: number, delayMs: number, view = "v1"): RetryEntry => ({ at, delayMs, view });

describe("retryDue", () => {
  it.each([
    ["never tried", undefined, 0, "v1", true],
    ["before its wait, same view", entry(10_000, 4000), 13_999, "v1", false],
    ["at the end of its wait", entry(10_000, 4000), 14_000, "v1", true],
    ["view changed, but within 1 s of the attempt", entry(10_000, 4000), 10_999, "v2", false],
    ["view changed, 1 s after the attempt", entry(10_000, 4000), 11_000, "v2", true],
    ["same view 1 s after: still waiting", entry(10_000, 4000), 11_000, "v1", false],
  ])("%s", (_what, r, now, view, want) => expect(retryDue(r, now, view)).toBe(want));
});

describe("afterAttempt", () => {
  it("starts at 1 s and doubles up to 30 s", () => {
    let r: RetryEntry | undefined;
    const waits: number[] = [];
    for (let i = 0; i < 8; i++) {
      r = afterAttempt(r, i * 1000, "v");
      waits.push(r.delayMs);
    }
    expect(waits).toEqual([
      1000,
      2000,
      4000,
      8000,
      16_000,
      RETRY_MAX_MS,
      RETRY_MAX_MS,
      RETRY_MAX_MS,
    ]);
    expect(waits[0]).toBe(RETRY_FIRST_MS);
  });

  it("records the attempt's time and view", () =>
    expect(afterAttempt(entry(0, 2000, "a"), 5000, "b")).toEqual({
      at: 5000,
      delayMs: 4000,
      view: "b",
    }));
});

describe("capacityView", () => {
  const cap = (node_id: string, free_bytes: number | null, health_code?: string) =>
    ({
      node_id,
      free_bytes,
      ...(health_code ? { unavailable: { health_code } } : {}),
    }) as unknown as NodeCapacity;

  it("names each node, its free memory in 64 MiB steps and why it is unavailable", () =>
    expect(capacityView([cap("n1", 2 ** 30), cap("n2", null, "engine_missing")])).toBe(
      "n1:16:,n2:?:engine_missing",
    ));

  it("does not change for less than a 64 MiB step, and changes for one", () => {
    const base = capacityView([cap("n1", 2 ** 30)]);
    expect(capacityView([cap("n1", 2 ** 30 + 2 ** 25)])).toBe(base);
    expect(capacityView([cap("n1", 2 ** 30 + 2 ** 26)])).not.toBe(base);
  });
});
