import { describe, expect, it } from "vitest";
import { StopRequests } from "./stop-requests.ts";

describe("stop requests", () => {
  it.each([
    { what: "one signal", at: [0], kinds: ["first"] },
    {
      what: "a group signal: the node's own copy, then the supervisor's forward 11 ms later",
      at: [0, 11],
      kinds: ["first", "duplicate"],
    },
    {
      what: "Ctrl-C to the group while the launcher also sends SIGTERM",
      at: [0, 3, 8],
      kinds: ["first", "duplicate", "duplicate"],
    },
    {
      what: "a deliberate second stop after the window",
      at: [0, 5, 1000],
      kinds: ["first", "duplicate", "second"],
    },
    { what: "a second stop long after", at: [0, 60_000], kinds: ["first", "second"] },
  ])("$what", ({ at, kinds }) => {
    const s = new StopRequests(1000);
    expect(at.map((t) => s.take(t))).toEqual(kinds);
  });
});
