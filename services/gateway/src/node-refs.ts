// One name for a node: wherever the API takes a node id (excluded_nodes, excluded_node_ids), it takes
// the node's name too. Pure: resolved against the session's members.
import { ServiceError } from "@ic/protocol";
import type { ControlState } from "@ic/protocol";

/** What reads as a session's node id (nodeIdFor makes `n-` and 12 hex digits): its prefix. */
const NODE_ID = /^n-/;

/**
 * The node ids that `refs` name, each a node id or a node's name, in order and without repeats.
 * A name that no member has, or that several share, is a 400 that lists the members (name and id).
 * An id-shaped ref that is no member is dropped: node ids change with every session, and the spec
 * says a stale id in an exclusion list is ignored.
 */
export function resolveNodeRefs(
  state: Pick<ControlState, "members">,
  refs: readonly string[],
  field: string,
): string[] {
  const members = Object.values(state.members);
  const out = new Set<string>();
  const unknown: string[] = [];
  const shared: string[] = [];
  for (const ref of refs) {
    if (state.members[ref]) {
      out.add(ref);
      continue;
    }
    const named = members.filter((m) => m.name === ref);
    if (named.length === 1) out.add(named[0]!.node_id);
    else if (named.length > 1) shared.push(ref);
    else if (!NODE_ID.test(ref)) unknown.push(ref);
  }
  if (unknown.length === 0 && shared.length === 0) return [...out];
  const known = members
    .map((m) => ({ name: m.name, node_id: m.node_id }))
    .sort((a, b) => a.name.localeCompare(b.name));
  const list = known.map((k) => `${k.name} (${k.node_id})`).join(", ") || "none";
  const problems = [
    ...(unknown.length > 0 ? [`no node is named ${unknown.join(", ")}`] : []),
    ...(shared.length > 0 ? [`several nodes are named ${shared.join(", ")}: use the node id`] : []),
  ];
  throw new ServiceError(
    "invalid_request",
    `${field}: ${problems.join("; ")}; the nodes are ${list}`,
    { details: { field, unknown, ambiguous: shared, nodes: known } },
  );
}
