// CPU time from /proc, for the benchmarks: every process's stat line, one process's user and system
// time, and the whole machine's busy time.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

/** Length of one /proc CPU clock tick (ms). */
export const TICK_MS = 1000 / Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim() || 100);

/**
 * Every process's /proc/<pid>/stat: its name and the fields after it (fields[0] is field 3, state:
 * ppid is fields[1], pgrp fields[2], utime fields[11], stime fields[12]).
 */
export function* procStats(): Generator<{ pid: number; name: string; fields: string[] }> {
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${d}/stat`, "utf8");
    } catch {
      continue; // gone meanwhile
    }
    const close = stat.lastIndexOf(")");
    const name = stat.slice(stat.indexOf("(") + 1, close);
    yield { pid: Number(d), name, fields: stat.slice(close + 2).split(" ") };
  }
}

/** User and system CPU ms a process used so far (/proc/<pid>/stat); null once it is gone. */
export function processCpuMs(pid: number | undefined): { userMs: number; systemMs: number } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { userMs: Number(f[11]) * TICK_MS, systemMs: Number(f[12]) * TICK_MS };
  } catch {
    return null;
  }
}

/** CPU ms the whole machine has spent busy (every core, kernel included) since boot. */
export function machineBusyMs(): number {
  const line = readFileSync("/proc/stat", "utf8").split("\n")[0]!;
  // cpu user nice system idle iowait irq softirq steal ...
  const v = line.trim().split(/\s+/).slice(1).map(Number);
  const busy = v[0]! + v[1]! + v[2]! + v[5]! + v[6]! + v[7]!;
  return busy * TICK_MS;
}
