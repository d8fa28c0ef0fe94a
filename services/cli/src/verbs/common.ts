// What the verbs share: where output goes, the state document's shape as the CLI reads it, and
// the lookups that turn what a user typed (an id prefix, a node name) into ids.
import type { Client } from "../client.ts";
import { ApiError } from "../client.ts";
import { UsageError } from "../args.ts";
import type { Parsed } from "../args.ts";
import { uniqueId } from "../format.ts";

/** Where output goes (tests and the terminal). */
export interface Io {
  /** A line (or lines) of output. */
  out(text: string): void;
  /** Text as it is, no newline added (a streamed answer). */
  write(text: string): void;
  err(text: string): void;
  readonly tty: boolean;
}

/** The state document (GET /state) and a pull, as the node serves them. */
import type { StateDocument } from "@ic/protocol";
export type { Pull } from "@ic/protocol";
export type StateDoc = StateDocument;

/**
 * Waits until the instance's runners are all ready (it serves), printing each change of what it is
 * doing; an ApiError when a runner fails or the instance goes.
 */
export async function waitServing(c: Client, id: string, io: Io, p: Parsed): Promise<void> {
  let last = "";
  for (;;) {
    const s = await c.get<StateDoc>("/state");
    const inst = s.instances.find((i) => i.instance_id === id);
    if (!inst) throw new ApiError(410, "instance_lost", `${id} is gone from the cluster`);
    const failed = inst.runners.find((r) => r.state === "RunnerFailed");
    if (failed)
      throw new ApiError(
        500,
        "runner_failed",
        `rank ${failed.rank} of ${id} failed: ${failed.last_error ?? failed.reason ?? "no reason given"}`,
      );
    const now = inst.runners.map((r) => `rank ${r.rank} ${r.state}`).join(", ") || "no runner yet";
    if (now !== last && !p.json) io.out(now);
    last = now;
    const ready = inst.runners.filter((r) => r.state === "RunnerReady").length;
    if (ready > 0 && ready >= inst.assignments.length) {
      if (!p.json) io.out(`${id} serves`);
      return;
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

export const print = (io: Io, p: Parsed, value: unknown, text: () => string) =>
  io.out(p.json ? JSON.stringify(value, null, 2) : text());

/** The instance id `ref` names: the whole id, or a prefix only one instance has (ic rm i-1c92). */
export async function instanceId(c: Client, ref: string): Promise<string> {
  // A whole id needs no lookup (nor the read scope it takes).
  if (/^i-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(ref)) return ref;
  const r = await c.get<{ instances: { instance_id: string }[] }>("/instances");
  return uniqueId(
    ref,
    r.instances.map((i) => i.instance_id),
    "instance",
  );
}

/**
 * The member a `--node` value names: its name, its node id, or a prefix of the id only one has; a
 * usage error listing the nodes otherwise (never silently the node asked).
 */
export async function memberOf(
  c: Client,
  ref: string,
): Promise<{ node_id: string; name: string; api_url: string }> {
  const s = await c.get<StateDoc>("/state");
  const all = s.node_identities;
  const byName = all.filter((m) => m.name === ref);
  const byId = all.filter(
    (m) => m.node_id === ref || (ref.length >= 4 && m.node_id.startsWith(ref)),
  );
  const found = byName.length > 0 ? byName : byId;
  if (found.length === 1) return found[0]!;
  const known = all.map((m) => `${m.name} (${m.node_id})`).join(", ");
  throw new UsageError(
    found.length === 0
      ? `--node: no node is named ${ref}; the nodes are ${known}`
      : `--node: ${ref} names several nodes (${found.map((m) => m.node_id).join(", ")}); use the id`,
  );
}

/** Names nodes for output: `name (n-…)`, the id alone when the node is not a member. */
export async function nodeNamer(c: Client): Promise<(id: string) => string> {
  const s = await c.get<StateDoc>("/state");
  const names = new Map<string, string>(s.node_identities.map((m) => [m.node_id, m.name]));
  return (id) => {
    const name = names.get(id);
    return name ? `${name} (${id})` : id;
  };
}
