import { describe, expect, it } from "vitest";
import { livePeer, readyInstance } from "../testing/views.ts";
import { routable } from "./routing.ts";

const inst = readyInstance;
const peer = (key: string, draining = false) => livePeer(key, { draining });

describe("routable (make before break)", () => {
  const a = inst("a", ["p1"]);
  const b = inst("b", ["p2"]);
  const split = inst("s", ["p2", "p3"]);
  it.each([
    {
      what: "every heard instance when none drains",
      inst: [a, b],
      live: [peer("p1"), peer("p2")],
      want: ["a", "b"],
    },
    {
      what: "the one off the draining node",
      inst: [a, b],
      live: [peer("p1", true), peer("p2")],
      want: ["b"],
    },
    {
      what: "the draining node's only instance while none is ready elsewhere",
      inst: [a],
      live: [peer("p1", true), peer("p2")],
      want: ["a"],
    },
    {
      what: "the draining ones when every instance is on a draining node",
      inst: [a, b],
      live: [peer("p1", true), peer("p2", true)],
      want: ["a", "b"],
    },
    {
      what: "not an instance with any rank on a draining node while another is ready",
      inst: [a, split],
      live: [peer("p1"), peer("p2"), peer("p3", true)],
      want: ["a"],
    },
    {
      what: "not a retiring replica while another is ready",
      inst: [{ ...a, retiring: true as const }, b],
      live: [peer("p1"), peer("p2")],
      want: ["b"],
    },
    {
      what: "the retiring replica while the other is on a draining node",
      inst: [{ ...a, retiring: true as const }, b],
      live: [peer("p1"), peer("p2", true)],
      want: ["a", "b"],
    },
    {
      what: "the retiring replica when it is the only one ready",
      inst: [{ ...a, retiring: true as const }],
      live: [peer("p1"), peer("p2")],
      want: ["a"],
    },
    { what: "none whose rank 0 is unheard", inst: [a, b], live: [peer("p2", true)], want: ["b"] },
    { what: "nothing when nothing is heard", inst: [a], live: [], want: [] },
  ])("$what", ({ inst: instances, live, want }) => {
    expect(routable(instances, live).map((i) => i.instance.instance_id)).toEqual(want);
  });
});
