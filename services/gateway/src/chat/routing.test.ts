import { describe, expect, it } from "vitest";
import type { Instance, PeerView } from "@ic/protocol";
import type { ReadyInstance } from "../readiness.ts";
import { routable } from "./routing.ts";

/** A ready instance with one rank per peer key, rank 0 first. */
function inst(id: string, peers: string[]): ReadyInstance {
  return {
    endpoint: `http://${id}`,
    instance: {
      instance_id: id,
      assignments: peers.map((p, rank) => ({ rank, peer_key: p, node_id: `n-${p}` })),
    } as unknown as Instance,
  };
}

function peer(key: string, draining = false): PeerView {
  return { heartbeat: { peer_key: key, draining } as PeerView["heartbeat"], lastHeard: 0 };
}

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
    { what: "none whose rank 0 is unheard", inst: [a, b], live: [peer("p2", true)], want: ["b"] },
    { what: "nothing when nothing is heard", inst: [a], live: [], want: [] },
  ])("$what", ({ inst: instances, live, want }) => {
    expect(routable(instances, live).map((i) => i.instance.instance_id)).toEqual(want);
  });
});
