// Byte-range parsing against RFC 9110: single ranges, suffix ranges, clamping and unsatisfiable ranges.
// The store host relies on these answers for resumable transfers.
import { describe, expect, it } from "vitest";
import { parseContentRange, parseRange } from "./range.ts";

describe("parseRange", () => {
  it.each([
    ["no header", undefined, 100, { kind: "full" }],
    ["open-ended range", "bytes=10-", 100, { kind: "partial", start: 10, end: 99 }],
    ["closed range", "bytes=10-19", 100, { kind: "partial", start: 10, end: 19 }],
    ["end past the file is clamped", "bytes=90-500", 100, { kind: "partial", start: 90, end: 99 }],
    ["suffix range", "bytes=-5", 100, { kind: "partial", start: 95, end: 99 }],
    ["suffix longer than the file", "bytes=-500", 100, { kind: "partial", start: 0, end: 99 }],
    ["start at the size is unsatisfiable", "bytes=100-", 100, { kind: "unsatisfiable" }],
    ["end before start is unsatisfiable", "bytes=20-10", 100, { kind: "unsatisfiable" }],
    ["zero suffix is unsatisfiable", "bytes=-0", 100, { kind: "unsatisfiable" }],
    ["any range of an empty file is unsatisfiable", "bytes=0-", 0, { kind: "unsatisfiable" }],
    ["multi-range falls back to the full file", "bytes=0-1,5-6", 100, { kind: "full" }],
    ["other units fall back to the full file", "items=0-1", 100, { kind: "full" }],
    ["whitespace is tolerated", " bytes = 3 - 4 ", 100, { kind: "partial", start: 3, end: 4 }],
  ] as const)("%s", (_name, header, size, expected) => {
    expect(parseRange(header, size)).toEqual(expected);
  });
});

describe("parseContentRange", () => {
  it("reads start, end and total", () => {
    expect(parseContentRange("bytes 10-99/100")).toEqual({ start: 10, end: 99, total: 100 });
  });
  it("rejects malformed headers", () => {
    expect(parseContentRange("bytes */100")).toBeNull();
    expect(parseContentRange(null)).toBeNull();
  });
});
