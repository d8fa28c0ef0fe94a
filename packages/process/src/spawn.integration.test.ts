// The spawn path with real processes: children die with their parent (pdeathsig), keep their pid
// under setpriv, are recorded while they live, and stop with SIGTERM then SIGKILL.
import { spawn } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { deathSignalAvailable, procStat, spawnChild, sweepOrphans, waitFor } from "./index.ts";
import type { ChildRecord } from "./index.ts";

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO_ROOT = resolve(HERE, "../../..");
const FIXTURE = join(HERE, "spawn-children.fixture.ts");

const dirs: string[] = [];
const strays: number[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
afterEach(() => {
  for (const pid of strays.splice(0)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone
    }
  }
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "ic-children-"));
  dirs.push(d);
  return d;
}

/** Alive and not a zombie (an orphan's zombie waits for whoever reaps it here). */
function running(pid: number): boolean {
  const s = procStat(pid);
  return s !== undefined && s.state !== "Z";
}

function ppid(pid: number): number | undefined {
  const m = /^PPid:\s+(\d+)$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) : undefined;
}

/** Field `n` (1-based, as proc(5) numbers them) of /proc/<pid>/stat. */
function statField(pid: number, n: number): number {
  const text = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(
    text
      .slice(text.lastIndexOf(")") + 1)
      .trim()
      .split(/\s+/)[n - 3],
  );
}

/** The wait status of a zombie (/proc stat field 52): the signal number for a killed process. */
function exitStatus(pid: number): number | undefined {
  return statField(pid, 52);
}

interface FixtureReport {
  pid: number;
  children: { pid: number; diesWithParent: boolean }[];
}

/** The process group of a process (/proc stat field 5). */
function pgid(pid: number): number {
  return statField(pid, 5);
}

/**
 * Starts the fixture (a Node process spawning `count` sleepers) and reads its report; `detached`:
 * in a process group of its own, as the launcher starts a node.
 */
async function startFixture(
  dir: string,
  count: number,
  mode?: "worker" | "worker-setpriv",
  detached = false,
): Promise<{ proc: ChildProcess; report: FixtureReport }> {
  const proc = spawn(
    process.execPath,
    ["--import", "tsx", FIXTURE, dir, String(count), ...(mode ? [mode] : [])],
    { cwd: REPO_ROOT, stdio: ["ignore", "pipe", "inherit"], detached },
  );
  strays.push(proc.pid!);
  const line = await new Promise<string>((res, rej) => {
    createInterface({ input: proc.stdout! }).once("line", res);
    proc.once("exit", (code) => rej(new Error(`fixture exited with ${code}`)));
  });
  const report = JSON.parse(line) as FixtureReport;
  strays.push(...report.children.map((c) => c.pid));
  return { proc, report };
}

function records(dir: string): ChildRecord[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).map((n) => JSON.parse(readFileSync(join(dir, n), "utf8")) as ChildRecord);
}

const linux = process.platform === "linux";

describe.runIf(linux)("children of a node process", () => {
  it("setpriv with --pdeathsig is available here (util-linux)", () => {
    expect(deathSignalAvailable()).toBe(true);
  });

  it("outlive the parent's thread-pool work, and die within 1 s of a kill -9 of the parent", async () => {
    const dir = tempDir();
    const { proc, report } = await startFixture(dir, 2);
    const pids = report.children.map((c) => c.pid);
    expect(report.children.every((c) => c.diesWithParent)).toBe(true);
    // pdeathsig fires when the spawning *thread* exits: the main thread lives as long as the process,
    // so a second and a half of fs, dns and crypto work on pool threads must leave them running.
    await new Promise((r) => setTimeout(r, 1500));
    for (const pid of pids) {
      expect(running(pid)).toBe(true);
      expect(ppid(pid)).toBe(report.pid);
      // setpriv exec'd the program: the pid spawn returned is the program's own.
      expect(readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[0]).toBe("sleep");
    }
    // Each child is recorded under its pid with its own start time and its owner.
    const recs = records(dir);
    expect(recs.map((r) => r.pid).sort()).toEqual([...pids].sort());
    for (const r of recs) {
      expect(r.start_time).toBe(procStat(r.pid)!.startTime);
      expect(r.owner.pid).toBe(report.pid);
      expect(r.argv0).toMatch(/\/sleep$/);
    }
    proc.kill("SIGKILL");
    const t0 = Date.now();
    await waitFor(() => (pids.every((p) => !running(p)) ? true : undefined), {
      timeoutMs: 1000,
      intervalMs: 10,
      what: "children gone after kill -9 of their parent",
    });
    expect(Date.now() - t0).toBeLessThan(1000);
    // The parent died before it could remove the records; the sweep finds nothing left to kill.
    const swept = await sweepOrphans(dir);
    expect(swept.killed).toEqual([]);
    expect(swept.stale.map((r) => r.pid).sort()).toEqual([...pids].sort());
    expect(readdirSync(dir)).toEqual([]);
  });

  it("a signal to the parent's process group does not reach its children; they die with the parent", async () => {
    const dir = tempDir();
    const { proc, report } = await startFixture(dir, 2, undefined, true);
    const pids = report.children.map((c) => c.pid);
    expect(pgid(report.pid)).toBe(report.pid);
    for (const pid of pids) expect(pgid(pid)).not.toBe(report.pid);
    // The fixture, like a node, takes SIGTERM itself; a sleeper that saw it would die of it.
    process.kill(-report.pid, "SIGTERM");
    await new Promise((r) => setTimeout(r, 300));
    for (const pid of pids) expect(running(pid)).toBe(true);
    proc.kill("SIGKILL");
    await waitFor(() => (pids.every((p) => !running(p)) ? true : undefined), {
      timeoutMs: 1000,
      intervalMs: 10,
      what: "children gone after kill -9 of their parent",
    });
  });

  it("a child spawned from a worker thread is not tied to that thread; the sweep takes it after its owner dies", async () => {
    const dir = tempDir();
    const { proc, report } = await startFixture(dir, 1, "worker");
    const child = report.children[0]!;
    // The worker thread has exited: a death signal bound to it would have killed the child by now.
    expect(child.diesWithParent).toBe(false);
    await new Promise((r) => setTimeout(r, 300));
    expect(running(child.pid)).toBe(true);
    proc.kill("SIGKILL");
    await new Promise((r) => setTimeout(r, 1000));
    expect(running(child.pid)).toBe(true); // an orphan now: exactly what the sweep is for
    const swept = await sweepOrphans(dir);
    expect(swept.killed.map((r) => r.pid)).toEqual([child.pid]);
    expect(running(child.pid)).toBe(false);
    expect(readdirSync(dir)).toEqual([]);
  });

  it("(why the main thread only) a bare pdeathsig child of a worker thread dies with the thread, not the process", async () => {
    const dir = tempDir();
    const { proc, report } = await startFixture(dir, 1, "worker-setpriv");
    const child = report.children[0]!;
    await waitFor(() => (!running(child.pid) ? true : undefined), {
      timeoutMs: 1000,
      intervalMs: 10,
      what: "the child killed by the exit of the thread that spawned it",
    });
    expect(proc.exitCode).toBeNull(); // the process itself is still running
    // Its zombie waits under the process: the exit status (stat field 52) says SIGKILL, not an error.
    expect(exitStatus(child.pid)).toBe(9);
  });

  it("runs a niced child at that niceness under its own pid, with its death signal still armed", async () => {
    const c = spawnChild({ bin: "sleep", args: ["30"], niceness: 7 });
    strays.push(c.pid!);
    await waitFor(
      async () =>
        readFileSync(`/proc/${c.pid}/comm`, "utf8").trim() === "sleep" ? true : undefined,
      { timeoutMs: 2000, what: "sleep exec'd" },
    );
    // `nice -n` adds to this process's own niceness (a suite run under `nice` starts above 0).
    const niceOf = (pid: number | "self") =>
      Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ")[16]);
    expect(niceOf(c.pid!)).toBe(Math.min(19, niceOf("self") + 7));
    expect(c.diesWithParent).toBe(true);
    await c.stop(1000);
  });

  it("removes a child's record when it is reaped", async () => {
    const dir = tempDir();
    const c = spawnChild({ bin: "sleep", args: ["0.1"] }, { recordIn: dir });
    expect(records(dir).map((r) => r.pid)).toEqual([c.pid]);
    expect(await c.exited).toEqual({ code: 0, signal: undefined });
    expect(readdirSync(dir)).toEqual([]);
  });
});

describe("stopping a child", () => {
  it("SIGTERM ends a child that honours it", async () => {
    const c = spawnChild({ bin: "sleep", args: ["100"] });
    expect(await c.stop(5000)).toEqual({ code: undefined, signal: "SIGTERM" });
  });

  it("SIGKILL follows after the grace when SIGTERM is ignored", async () => {
    const c = spawnChild({
      bin: "sh",
      args: ["-c", "trap '' TERM; echo armed; while :; do sleep 0.05; done"],
      stdout: "pipe",
    });
    await new Promise((r) => c.stdout!.once("data", r));
    const t0 = Date.now();
    expect(await c.stop(300)).toEqual({ code: undefined, signal: "SIGKILL" });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(290);
    // stop() is idempotent: the same exit, no second signal.
    expect(await c.stop(300)).toEqual({ code: undefined, signal: "SIGKILL" });
  });

  it("a missing program fails like spawn's ENOENT, without a pid", async () => {
    const c = spawnChild({ bin: "/nonexistent/engine", args: [] });
    expect(c.pid).toBeUndefined();
    expect((await c.exited).error).toMatch(/ENOENT/);
    expect(await c.stop(100)).toMatchObject({ code: undefined });
  });

  it("appends stdout and stderr to one file", async () => {
    const file = join(tempDir(), "out.log");
    const c = spawnChild({
      bin: "sh",
      args: ["-c", "echo out; echo err >&2"],
      stdout: { appendTo: file },
      stderr: { appendTo: file },
    });
    await c.exited;
    expect(readFileSync(file, "utf8").split("\n").filter(Boolean).sort()).toEqual(["err", "out"]);
  });
});
