// Table tests of the event log's pure policies: disk-check cadence, mode transitions with
// hysteresis, compaction trigger and archive rotation order.
import { describe, expect, it } from "vitest";
import type { ArchiveFile, Mode } from "./policy.ts";
import {
  nextMode,
  planArchiveRotation,
  planCompaction,
  resumeThreshold,
  shouldCheckDisk,
} from "./policy.ts";
import { MiB, GiB } from "@ic/protocol";

describe("shouldCheckDisk", () => {
  it.each([
    [0, 1024, false],
    [1023, 1024, false],
    [1024, 1024, true],
    [5000, 1024, true],
    [1, 1, true],
    [0, 1, false],
    [0, 0, false],
    [1, 0, true],
  ])("%i appends since the last check, every %i -> %s", (since, every, expected) => {
    expect(shouldCheckDisk(since, every)).toBe(expected);
  });
});

describe("nextMode", () => {
  const floor = 2 * GiB;
  it.each<[Mode, number, Mode, string]>([
    ["normal", 10 * GiB, "normal", "plenty of space"],
    ["normal", floor + 1, "normal", "one byte above the floor"],
    ["normal", floor, "counting-only", "reaching the floor degrades"],
    ["normal", 0, "counting-only", "full disk"],
    ["counting-only", floor, "counting-only", "still at the floor"],
    [
      "counting-only",
      floor + 100 * MiB,
      "counting-only",
      "above the floor but inside the 10% margin",
    ],
    ["counting-only", floor * 1.1, "counting-only", "exactly at floor + 10%"],
    ["counting-only", floor * 1.1 + 1, "normal", "above floor + 10% returns to normal"],
    ["counting-only", 10 * GiB, "normal", "plenty of space again"],
  ])("%s with %d free bytes -> %s (%s)", (mode, free, expected) => {
    expect(nextMode(mode, free, floor)).toBe(expected);
  });

  it.each<[number, number]>([
    [2 * GiB, 2 * GiB * 1.1],
    [0, 64 * MiB],
    [100 * MiB, 164 * MiB],
    [1024 * MiB, 1024 * MiB + 102.4 * MiB],
  ])("the resume threshold for floor %d is %d (10%%, at least 64 MiB)", (floorBytes, expected) => {
    expect(resumeThreshold(floorBytes)).toBeCloseTo(expected, 3);
  });

  it("a zero floor still needs 64 MiB free before leaving counting-only", () => {
    expect(nextMode("normal", 1, 0)).toBe("normal");
    expect(nextMode("normal", 0, 0)).toBe("counting-only");
    expect(nextMode("counting-only", 64 * MiB, 0)).toBe("counting-only");
    expect(nextMode("counting-only", 64 * MiB + 1, 0)).toBe("normal");
  });
});

describe("planCompaction", () => {
  const limits = { compactAboveBytes: 256 * MiB, keepEvents: 20000, keptBytesAfterLast: 0 };
  it.each<[string, number, number, boolean]>([
    ["empty file", 0, 0, false],
    ["below the threshold", 100 * MiB, 0, false],
    ["exactly at the threshold", 256 * MiB, 0, false],
    ["one byte above the threshold", 256 * MiB + 1, 0, true],
    ["above, small kept part from the last compaction", 300 * MiB, 10 * MiB, true],
    ["kept part alone was above the threshold: wait for it to double", 400 * MiB, 300 * MiB, false],
    ["kept part doubled", 600 * MiB + 1, 300 * MiB, true],
  ])("%s", (_name, active, keptAfterLast, compact) => {
    const plan = planCompaction(active, { ...limits, keptBytesAfterLast: keptAfterLast });
    expect(plan.compact).toBe(compact);
    if (plan.compact) expect(plan.keepEvents).toBe(20000);
  });
});

describe("planArchiveRotation", () => {
  const a = (name: string, bytes: number, mtime: number): ArchiveFile => ({ name, bytes, mtime });
  it.each<[string, ArchiveFile[], number, string[]]>([
    ["no archives", [], 100, []],
    ["under the limit", [a("x", 40, 1), a("y", 50, 2)], 100, []],
    ["exactly at the limit", [a("x", 50, 1), a("y", 50, 2)], 100, []],
    ["oldest goes first", [a("new", 60, 3), a("old", 60, 1)], 100, ["old"]],
    [
      "several oldest go until the total fits",
      [a("a", 30, 1), a("b", 30, 2), a("c", 30, 3), a("d", 30, 4)],
      60,
      ["a", "b"],
    ],
    [
      "equal mtimes fall back to the name (timestamped names sort chronologically)",
      [a("archive-20250102.jsonl.gz", 60, 5), a("archive-20250101.jsonl.gz", 60, 5)],
      100,
      ["archive-20250101.jsonl.gz"],
    ],
    ["a single archive over the limit is deleted too", [a("huge", 500, 1)], 100, ["huge"]],
    ["a zero limit deletes everything", [a("x", 1, 1), a("y", 1, 2)], 0, ["x", "y"]],
  ])("%s", (_name, archives, limit, removed) => {
    const plan = planArchiveRotation(archives, limit);
    expect(plan.remove).toEqual(removed);
    expect(plan.keptBytes).toBeLessThanOrEqual(limit);
    const kept = plan.keep.map((k) => k.name);
    for (const name of removed) expect(kept).not.toContain(name);
    expect(plan.keep.length + plan.remove.length).toBe(archives.length);
  });
});
