// The orphan sweep with real processes: it kills a recorded orphan only when pid, start time and boot
// all match, and leaves the records of a live owner alone.
import { spawn, spawnSync } from "node:child_process";
import type { ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { procStat, sweepOrphans, writeChildRecord } from "./index.ts";
import type { ChildRecord, ProcessIdentity } from "./index.ts";

const dirs: string[] = [];
const procs: ChildProcess[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
afterEach(() => procs.splice(0).forEach((p) => p.kill("SIGKILL")));

function sleeper(): { pid: number; startTime: number } {
  const p = spawn("sleep", ["100"], { stdio: "ignore" });
  procs.push(p);
  return { pid: p.pid!, startTime: procStat(p.pid!)!.startTime };
}

function running(pid: number): boolean {
  const s = procStat(pid);
  return s !== undefined && s.state !== "Z";
}

const bootId = () => readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
/** An owner that is gone: a process that has exited (its start time cannot match anything alive). */
const deadOwner = (): ProcessIdentity => ({ pid: spawnSync("true").pid, start_time: 0 });
const liveOwner = (): ProcessIdentity => ({
  pid: process.pid,
  start_time: procStat(process.pid)!.startTime,
});

function record(pid: number, startTime: number, over: Partial<ChildRecord> = {}): ChildRecord {
  return {
    pid,
    start_time: startTime,
    boot_id: bootId(),
    argv0: "/usr/bin/sleep",
    owner: deadOwner(),
    ...over,
  };
}

describe.runIf(process.platform === "linux")("sweepOrphans", () => {
  it("kills a recorded orphan whose start time matches and spares a pid whose start time differs", async () => {
    const dir = mkdtempSync(join(tmpdir(), "ic-sweep-"));
    dirs.push(dir);
    const orphan = sleeper();
    const recycled = sleeper(); // stands for a pid the kernel handed to an unrelated process
    writeChildRecord(dir, record(orphan.pid, orphan.startTime));
    writeChildRecord(dir, record(recycled.pid, recycled.startTime + 1));
    const report = await sweepOrphans(dir);
    expect(report.killed.map((r) => r.pid)).toEqual([orphan.pid]);
    expect(report.stale.map((r) => r.pid)).toEqual([recycled.pid]);
    expect(running(orphan.pid)).toBe(false);
    expect(running(recycled.pid)).toBe(true);
    expect(existsSync(join(dir, `${orphan.pid}.json`))).toBe(false);
    expect(existsSync(join(dir, `${recycled.pid}.json`))).toBe(false);
  });

  it("leaves a live owner's children and their records alone", async () => {
    const dir = mkdtempSync(join(tmpdir(), "ic-sweep-"));
    dirs.push(dir);
    const mine = sleeper();
    writeChildRecord(dir, record(mine.pid, mine.startTime, { owner: liveOwner() }));
    const report = await sweepOrphans(dir);
    expect(report.kept.map((r) => r.pid)).toEqual([mine.pid]);
    expect(report.killed).toEqual([]);
    expect(running(mine.pid)).toBe(true);
    expect(existsSync(join(dir, `${mine.pid}.json`))).toBe(true);
  });

  it("never kills on a record from another boot, and drops files that are not records", async () => {
    const dir = mkdtempSync(join(tmpdir(), "ic-sweep-"));
    dirs.push(dir);
    const p = sleeper();
    writeChildRecord(dir, record(p.pid, p.startTime, { boot_id: "another-boot" }));
    writeFileSync(join(dir, "123.json"), "{ not json");
    writeFileSync(join(dir, "456.json.tmp"), "{}");
    const report = await sweepOrphans(dir);
    expect(report.killed).toEqual([]);
    expect(report.stale.map((r) => r.pid)).toEqual([p.pid]);
    expect(report.invalid).toEqual(["123.json"]);
    expect(running(p.pid)).toBe(true);
  });

  it("is a no-op for a directory that does not exist", async () => {
    expect(await sweepOrphans(join(tmpdir(), "ic-sweep-none-here"))).toEqual({
      killed: [],
      stale: [],
      kept: [],
      survived: [],
      invalid: [],
    });
  });
});
