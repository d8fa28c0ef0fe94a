// A real node process (services/node, started by the testkit) and its children: kill -9 of the node
// takes its nats-server and llama-server down with it (pdeathsig), and a node starting sweeps the
// orphans recorded in its runtime directory (engine.runner_log_dir) before it spawns anything.
import { spawn, spawnSync } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { placeAndWait, seedStore, startCluster, waitFor, waitForConvergence } from "@ic/testkit";
import { childrenDir, procStat, writeChildRecord } from "@ic/process";
import type { ChildRecord } from "@ic/process";

const dirs: string[] = [];
const procs: ChildProcess[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
afterEach(() => procs.splice(0).forEach((p) => p.kill("SIGKILL")));

function tempDir(prefix: string): string {
  const d = mkdtempSync(join(tmpdir(), prefix));
  dirs.push(d);
  return d;
}

function running(pid: number): boolean {
  const s = procStat(pid);
  return s !== undefined && s.state !== "Z";
}

/** Live children of `parent`, with their names (comm). */
function childrenOf(parent: number): { pid: number; name: string }[] {
  const out: { pid: number; name: string }[] = [];
  for (const p of readdirSync("/proc").filter((x) => /^\d+$/.test(x))) {
    let status: string;
    try {
      status = readFileSync(`/proc/${p}/status`, "utf8");
    } catch {
      continue;
    }
    const ppid = /^PPid:\s+(\d+)$/m.exec(status)?.[1];
    const name = /^Name:\s+(.*)$/m.exec(status)?.[1];
    if (Number(ppid) === parent && name && running(Number(p))) out.push({ pid: Number(p), name });
  }
  return out;
}

describe.runIf(process.platform === "linux")("a node's children", () => {
  it("die within a second of a kill -9 of the node process", async () => {
    const { store, modelId } = await seedStore(tempDir("ic-store-"));
    const runtime = tempDir("ic-runtime-");
    await using cluster = await startCluster(1, {
      config: () => ({ store_path: store, engine: { runner_log_dir: runtime } }),
    });
    const node = cluster.nodes[0]!;
    await waitForConvergence(cluster.nodes, 1);
    await placeAndWait(node, { model_id: modelId });
    // The launcher forks the process that runs the node; that one spawns the engines and nats-server.
    const inner = childrenOf(node.pid!).find((c) => c.name === "node");
    expect(inner).toBeDefined();
    const kids = childrenOf(inner!.pid);
    expect(kids.map((k) => k.name).sort()).toEqual(["llama-server", "nats-server"]);
    // Both are recorded for the sweep, under their own pids.
    const recorded = readdirSync(childrenDir(runtime))
      .map(
        (n) => (JSON.parse(readFileSync(join(childrenDir(runtime), n), "utf8")) as ChildRecord).pid,
      )
      .sort();
    expect(recorded).toEqual(kids.map((k) => k.pid).sort());

    process.kill(inner!.pid, "SIGKILL");
    const t0 = Date.now();
    await waitFor(() => (kids.every((k) => !running(k.pid)) ? true : undefined), {
      timeoutMs: 1000,
      intervalMs: 10,
      what: "nats-server and llama-server gone after kill -9 of their node",
    });
    expect(Date.now() - t0).toBeLessThan(1000);
  });

  it("a starting node kills the orphans recorded by a dead predecessor, before its own children", async () => {
    const runtime = tempDir("ic-runtime-");
    const orphan = spawn("sleep", ["100"], { stdio: "ignore" });
    procs.push(orphan);
    const pid = orphan.pid!;
    writeChildRecord(childrenDir(runtime), {
      pid,
      start_time: procStat(pid)!.startTime,
      boot_id: readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim(),
      argv0: "/usr/bin/sleep",
      owner: { pid: spawnSync("true").pid, start_time: 0 }, // a node that is gone
    });
    await using cluster = await startCluster(1, {
      config: () => ({ engine: { runner_log_dir: runtime } }),
    });
    expect(running(pid)).toBe(false);
    expect(existsSync(join(childrenDir(runtime), `${pid}.json`))).toBe(false);
    // What is recorded now is the new node's own nats-server.
    const inner = childrenOf(cluster.nodes[0]!.pid!).find((c) => c.name === "node")!;
    const nats = childrenOf(inner.pid).find((c) => c.name === "nats-server")!;
    expect(readdirSync(childrenDir(runtime))).toEqual([`${nats.pid}.json`]);
  });
});
