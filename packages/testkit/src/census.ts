// What a test's processes leave behind: the processes and listening ports inside a lab host's
// namespace, engine processes by argv, and this process's open file descriptors. Chaos tests take
// a census before a fault and compare after recovery: nothing may be left over.
import { readdirSync, readFileSync } from "node:fs";
import { basename } from "node:path";
import { execFileSync } from "node:child_process";

export interface ProcInfo {
  readonly pid: number;
  /** Basename of argv[0] (`node`, `nats-server`, `llama-server`, `ggml-rpc-server`). */
  readonly name: string;
  readonly argv: readonly string[];
}

function argvOf(pid: number): string[] | undefined {
  try {
    const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    if (argv.at(-1) === "") argv.pop();
    return argv.length > 0 ? argv : undefined;
  } catch {
    return undefined;
  }
}

/** Live (not zombie) processes of a network namespace. */
export function namespaceProcesses(ns: string): ProcInfo[] {
  let out: string;
  try {
    out = execFileSync("ip", ["netns", "pids", ns], { encoding: "utf8" });
  } catch {
    return [];
  }
  const procs: ProcInfo[] = [];
  for (const line of out.split("\n")) {
    const pid = Number(line.trim());
    if (!pid) continue;
    try {
      if (/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"))) continue;
    } catch {
      continue;
    }
    const argv = argvOf(pid);
    if (argv) procs.push({ pid, name: basename(argv[0]!), argv });
  }
  return procs;
}

/** `address:port` of every listening TCP socket in a namespace. */
export function namespaceListeners(ns: string): string[] {
  let out: string;
  try {
    out = execFileSync("ip", ["netns", "exec", ns, "ss", "-ltnH"], { encoding: "utf8" });
  } catch {
    return [];
  }
  return out
    .split("\n")
    .map((l) => l.trim().split(/\s+/)[3])
    .filter((x): x is string => x !== undefined && x.length > 0)
    .sort();
}

/** Processes anywhere whose argv satisfies `match`. */
export function processesWhere(match: (argv: readonly string[]) => boolean): ProcInfo[] {
  const out: ProcInfo[] = [];
  for (const p of readdirSync("/proc")) {
    if (!/^\d+$/.test(p)) continue;
    const argv = argvOf(Number(p));
    if (argv && match(argv)) out.push({ pid: Number(p), name: basename(argv[0]!), argv });
  }
  return out;
}

/** Open file descriptors of this process. */
export function openFdCount(): number {
  return readdirSync("/proc/self/fd").length;
}

/** Per process name, how many: `{ node: 1, "nats-server": 1, "llama-server": 1 }`. */
export function countByName(procs: readonly ProcInfo[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const p of procs) out[p.name] = (out[p.name] ?? 0) + 1;
  return out;
}
