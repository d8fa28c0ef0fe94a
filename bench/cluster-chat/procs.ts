// CPU time of each node's processes, read from /proc: the node itself, the nats-server it started and
// its engine (the stand-in), found as the node's descendants, so each part's cost is counted apart.
import { isStandIn } from "../lib/stand-in.ts";
import { procStats, TICK_MS } from "../lib/proc.ts";

export type Part = "node" | "bus" | "engine";

interface Proc {
  readonly pid: number;
  readonly ppid: number;
  readonly comm: string;
  readonly ticks: number;
}

function processes(): Proc[] {
  return [...procStats()].map((p) => ({
    pid: p.pid,
    ppid: Number(p.fields[1]),
    comm: p.name,
    ticks: Number(p.fields[11]) + Number(p.fields[12]),
  }));
}

/** What a descendant of a node is: its nats-server, its engine, or part of the node. */
function partOf(p: Proc): Part {
  if (p.comm === "nats-server") return "bus";
  if (isStandIn(p.pid)) return "engine";
  return "node";
}

/** CPU ms of each part of each node (keyed by the node's pid), this process's own, now. */
export function cpuSnapshot(nodePids: readonly number[]): Map<number, Record<Part, number>> {
  const all = processes();
  const children = new Map<number, Proc[]>();
  for (const p of all) children.set(p.ppid, [...(children.get(p.ppid) ?? []), p]);
  const out = new Map<number, Record<Part, number>>();
  for (const root of nodePids) {
    const sums: Record<Part, number> = { node: 0, bus: 0, engine: 0 };
    const self = all.find((p) => p.pid === root);
    const stack = self ? [self] : [];
    while (stack.length) {
      const p = stack.pop()!;
      // A wrapper (ip netns exec) execs node in place; the node's own pid counts as the node.
      sums[p.pid === root ? "node" : partOf(p)] += p.ticks * TICK_MS;
      stack.push(...(children.get(p.pid) ?? []));
    }
    out.set(root, sums);
  }
  return out;
}

/** Per node and part: CPU ms spent between two snapshots. */
export function cpuSpent(
  before: Map<number, Record<Part, number>>,
  after: Map<number, Record<Part, number>>,
): Map<number, Record<Part, number>> {
  const out = new Map<number, Record<Part, number>>();
  for (const [pid, a] of after) {
    const b = before.get(pid) ?? { node: 0, bus: 0, engine: 0 };
    out.set(pid, { node: a.node - b.node, bus: a.bus - b.bus, engine: a.engine - b.engine });
  }
  return out;
}
