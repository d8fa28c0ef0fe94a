// Trace files: task id validation (no path escape), names, listing newest first, and the janitor
// pruning real files by a fake clock.
import { writeFileSync } from "node:fs";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import {
  isValidTaskId,
  parseTempFileName,
  parseTraceFileName,
  TraceFiles,
  traceFileName,
} from "./files.ts";
import { DAY_MS, expiredFiles, HOUR_MS, Janitor } from "./janitor.ts";
import type { ChromeTrace } from "./trace.ts";

const trace = (taskId: string, modelId = "test/tiny"): ChromeTrace => ({
  traceEvents: [{ name: "gateway receive", ph: "X", ts: 1, dur: 2, pid: 1, tid: 1 }],
  displayTimeUnit: "ms",
  otherData: {
    taskId,
    modelId,
    commandId: "chatcmpl-1",
    instanceId: "i-1",
    engineNodeId: null,
    node: "node-1",
    createdAt: new Date(0).toISOString(),
    stream: false,
    ok: true,
    status: 200,
    error: null,
    timings: null,
  },
});

/** A trace file as the writer leaves it. */
function put(files: TraceFiles, t: ChromeTrace, createdAtMs: number): void {
  writeFileSync(files.pathOf(traceFileName(t.otherData.taskId, createdAtMs)), JSON.stringify(t));
}

describe("task ids", () => {
  it.each(["t-1f2e3d4c-0000-4000-8000-000000000000", "t1", "A_b-9", "x".repeat(128)])(
    "accepts %s",
    (id) => expect(isValidTaskId(id)).toBe(true),
  );
  it.each([
    "",
    "..",
    "../etc/passwd",
    "t/1",
    "t\\1",
    "-t1",
    "_t1",
    "t.json",
    "t 1",
    "t%2F1",
    "t\u00e91",
    "t\n1",
    "x".repeat(129),
  ])("refuses %j", (id) => {
    expect(isValidTaskId(id)).toBe(false);
    expect(() => traceFileName(id, 1)).toThrow(/not a task id/);
  });

  it("names files <created ms>_<task id>.json and reads them back", () => {
    const name = traceFileName("t-abc", 1_763_900_000_123.7);
    expect(name).toBe("1763900000123_t-abc.json");
    expect(parseTraceFileName(name)).toEqual({ createdAtMs: 1_763_900_000_123, taskId: "t-abc" });
    expect(parseTraceFileName("notes.txt")).toBeUndefined();
    expect(parseTraceFileName(`.${name}.tmp`)).toBeUndefined();
    expect(parseTempFileName(`.${name}.tmp`)).toEqual({ createdAtMs: 1_763_900_000_123 });
  });
});

describe("TraceFiles", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "traces-"));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("writes, lists newest first and reads back by task id", async () => {
    const files = new TraceFiles(dir);
    put(files, trace("t-old", "org/a"), 1_000);
    put(files, trace("t-new", "org/b"), 3_000);
    put(files, trace("t-mid", "org/a"), 2_000);
    await writeFile(join(dir, "README"), "not a trace");
    await writeFile(join(dir, "5000_t-corrupt.json"), "{ half a fi");
    expect(await files.list(10)).toEqual([
      { taskId: "t-new", createdAt: new Date(3_000).toISOString(), modelId: "org/b" },
      { taskId: "t-mid", createdAt: new Date(2_000).toISOString(), modelId: "org/a" },
      { taskId: "t-old", createdAt: new Date(1_000).toISOString(), modelId: "org/a" },
    ]);
    // The newest file is the corrupt one: skipped, and the limit still counts readable traces.
    expect((await files.list(1)).map((e) => e.taskId)).toEqual(["t-new"]);
    expect((await files.list(2)).map((e) => e.taskId)).toEqual(["t-new", "t-mid"]);
    expect((await files.read("t-mid"))?.otherData.modelId).toBe("org/a");
    expect(await files.read("t-none")).toBeUndefined();
    expect(await files.read("t-corrupt")).toBeUndefined();
    await expect(files.read("../x")).rejects.toThrow(/not a task id/);
  });

  it("keeps every path inside its dir", () => {
    const files = new TraceFiles(dir);
    expect(files.pathOf("1_t-a.json")).toBe(join(dir, "1_t-a.json"));
    for (const bad of ["../x.json", "/etc/passwd", "a/b.json", "..", ""])
      expect(() => files.pathOf(bad)).toThrow(/outside/);
  });

  it("lists nothing for a dir that does not exist yet", async () => {
    const files = new TraceFiles(join(dir, "later"));
    expect(await files.list(10)).toEqual([]);
    expect(await files.read("t-a")).toBeUndefined();
  });
});

describe("janitor", () => {
  const NOW = 1_763_900_000_000;

  it("expires traces older than the retention and stale temp files, nothing else (table)", () => {
    const names = [
      `${NOW - 3 * DAY_MS - 1}_t-expired.json`,
      `${NOW - 3 * DAY_MS + 1}_t-kept.json`,
      `${NOW}_t-new.json`,
      `.${NOW - 2 * HOUR_MS}_t-x.json.tmp`,
      `.${NOW - 1000}_t-y.json.tmp`,
      "README",
      `${NOW - 10 * DAY_MS}_t-bad.id.json`,
    ];
    expect(expiredFiles(names, NOW, 3)).toEqual([
      `${NOW - 3 * DAY_MS - 1}_t-expired.json`,
      `.${NOW - 2 * HOUR_MS}_t-x.json.tmp`,
    ]);
    expect(expiredFiles(names, NOW, 0)).toEqual([
      `${NOW - 3 * DAY_MS - 1}_t-expired.json`,
      `${NOW - 3 * DAY_MS + 1}_t-kept.json`,
      `${NOW}_t-new.json`,
      `.${NOW - 2 * HOUR_MS}_t-x.json.tmp`,
    ]);
  });

  it("removes real files as the fake clock passes the retention", async () => {
    const dir = await mkdtemp(join(tmpdir(), "traces-janitor-"));
    try {
      const files = new TraceFiles(dir);
      let now = NOW;
      const janitor = new Janitor({
        files,
        retentionDays: 3,
        clock: { now: () => now },
        log: silentLogger(),
      });
      put(files, trace("t-day0"), NOW - DAY_MS);
      put(files, trace("t-day2"), NOW + DAY_MS);
      await writeFile(join(dir, "keep.me"), "");
      expect(await janitor.sweep()).toEqual([]);
      now = NOW + 2 * DAY_MS + 1; // t-day0 is 3 days and 1 ms old
      expect(await janitor.sweep()).toEqual([`${NOW - DAY_MS}_t-day0.json`]);
      expect((await files.list(10)).map((e) => e.taskId)).toEqual(["t-day2"]);
      now = NOW + 5 * DAY_MS;
      await janitor.sweep();
      expect(await readdir(dir)).toEqual(["keep.me"]);
      await janitor.stop();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("sweeps at start and then every interval", async () => {
    const dir = await mkdtemp(join(tmpdir(), "traces-janitor-"));
    try {
      const files = new TraceFiles(dir);
      let now = NOW;
      const janitor = new Janitor({
        files,
        retentionDays: 1,
        clock: { now: () => now },
        log: silentLogger(),
        intervalMs: 20,
      });
      put(files, trace("t-a"), NOW - 2 * DAY_MS);
      put(files, trace("t-b"), NOW);
      janitor.start();
      await expect.poll(() => files.list(10).then((l) => l.length)).toBe(1);
      now = NOW + 2 * DAY_MS;
      await expect.poll(() => files.list(10).then((l) => l.length)).toBe(0);
      await janitor.stop();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
