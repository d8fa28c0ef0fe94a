import { describe, expect, it } from "vitest";
import { ServiceError } from "@ic/protocol";
import type { ControlState, Member, NodeId } from "@ic/protocol";
import { resolveNodeRefs } from "./node-refs.ts";

const member = (node_id: string, name: string): Member => ({
  node_id: node_id as NodeId,
  peer_key: `p-${name}`,
  name,
  api_url: "",
  host: "",
  started_at: 0,
  joined_at: 0,
});
const state: Pick<ControlState, "members"> = {
  members: Object.fromEntries(
    [
      member("n-aaaaaaaaaaaa", "gpu-a"),
      member("n-bbbbbbbbbbbb", "gpu-b"),
      member("n-cccccccccccc", "twin"),
      member("n-dddddddddddd", "twin"),
    ].map((m) => [m.node_id, m]),
  ),
};

describe("resolveNodeRefs", () => {
  it.each([
    { refs: [], want: [] },
    { refs: ["n-aaaaaaaaaaaa"], want: ["n-aaaaaaaaaaaa"] },
    { refs: ["gpu-b"], want: ["n-bbbbbbbbbbbb"] },
    { refs: ["gpu-a", "n-aaaaaaaaaaaa", "gpu-b"], want: ["n-aaaaaaaaaaaa", "n-bbbbbbbbbbbb"] },
    // A stale id (another session's) is ignored, as the spec says; a twin is reached by its id.
    { refs: ["n-0123456789ab", "n-cccccccccccc"], want: ["n-cccccccccccc"] },
  ])("$refs -> $want", ({ refs, want }) => {
    expect(resolveNodeRefs(state, refs, "excluded_nodes")).toEqual(want);
  });

  it.each([
    {
      refs: ["bogus", "gpu-a"],
      message:
        "excluded_nodes: no node is named bogus; the nodes are gpu-a (n-aaaaaaaaaaaa), gpu-b (n-bbbbbbbbbbbb), twin (n-cccccccccccc), twin (n-dddddddddddd)",
      details: { unknown: ["bogus"], ambiguous: [] },
    },
    {
      refs: ["twin"],
      message: "excluded_nodes: several nodes are named twin: use the node id; the nodes are",
      details: { unknown: [], ambiguous: ["twin"] },
    },
    {
      refs: ["node-x", "Gpu-A", "n-stale"], // names are exact; an id-like ref is a stale id
      message: "excluded_nodes: no node is named node-x, Gpu-A;",
      details: { unknown: ["node-x", "Gpu-A"] },
    },
  ])("$refs is a 400 that lists the nodes", ({ refs, message, details }) => {
    let err: unknown;
    try {
      resolveNodeRefs(state, refs, "excluded_nodes");
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ServiceError);
    const e = err as ServiceError;
    expect(e.code).toBe("invalid_request");
    expect(e.message.startsWith(message)).toBe(true);
    expect(e.details).toMatchObject({ field: "excluded_nodes", ...details });
    expect((e.details as { nodes: unknown[] }).nodes).toHaveLength(4);
  });
});
