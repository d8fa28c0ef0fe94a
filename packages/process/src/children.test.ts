import { describe, expect, it } from "vitest";
import { parseProcStat } from "./children.ts";

// /proc/<pid>/stat lines: the comm field may hold spaces and parentheses.
const tail = "S 1 2 3 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 816648 1000 50";

describe("parseProcStat", () => {
  it.each([
    [`1234 (sleep) ${tail}`, { state: "S", startTime: 816648 }],
    [`1234 (llama server) ${tail}`, { state: "S", startTime: 816648 }],
    [`1234 (a) (b)) ${tail.replace(/^S/, "Z")}`, { state: "Z", startTime: 816648 }],
  ])("%s", (line, want) => {
    expect(parseProcStat(line)).toEqual(want);
  });

  it.each(["", "1234 sleep S 1", "1234 (x) S 1 2"])("rejects %j", (line) => {
    expect(parseProcStat(line)).toBeUndefined();
  });
});
