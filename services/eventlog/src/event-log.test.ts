// EventLog against a real temp directory with small limits: ordering, restart recovery, compaction
// into rotated archives, counting-only on low disk or ENOSPC and the way back, appends never throwing.
import { randomBytes } from "node:crypto";
import { mkdtemp, readdir, readFile, rm, stat, writeFile, appendFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { GiB, IndexedEventSchema, KiB, MiB } from "@ic/protocol";
import type { IndexedEvent } from "@ic/protocol";
import { silentLogger } from "@ic/log";
import type { AppendHandle, EventFiles } from "./disk.ts";
import { FakeDisk, nodeFiles } from "./disk.ts";
import type { EventLogConfig, EventLogDeps } from "./options.ts";
import { EventLog } from "./event-log.ts";
import { EventRecordSchema } from "./record.ts";

function failed(index: number): IndexedEvent {
  return IndexedEventSchema.parse({
    index,
    session_id: "s1",
    at: 1_700_000_000_000 + index,
    event: { type: "TaskFailed", task_id: `t${index}`, reason: "instance lost" },
  });
}

/** A NodeLeft event whose random reason makes it `bytes` long and incompressible. */
function bulky(index: number, bytes = 300): IndexedEvent {
  return IndexedEventSchema.parse({
    index,
    session_id: "s1",
    at: 1_700_000_000_000 + index,
    event: { type: "NodeLeft", node_id: "n1", reason: randomBytes(bytes / 2).toString("hex") },
  });
}

function enospc(): Error {
  return Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });
}

/** Real files, but the next write can be made to fail after writing half its bytes. */
class FlakyFiles implements EventFiles {
  failWith: (() => Error) | null = null;
  truncateFails = false;
  async openAppend(path: string): Promise<AppendHandle> {
    const real = await nodeFiles.openAppend(path);
    return {
      append: async (data) => {
        const make = this.failWith;
        if (make) {
          await real.append(data.subarray(0, Math.floor(data.length / 2)));
          throw make();
        }
        await real.append(data);
      },
      truncate: (len) =>
        this.truncateFails ? Promise.reject(new Error("EIO")) : real.truncate(len),
      close: () => real.close(),
    };
  }
}

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "eventlog-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function config(over: Partial<EventLogConfig> = {}): EventLogConfig {
  return {
    dir,
    compact_above_mb: 64 / 1024,
    keep_events: 100,
    archive_total_mb: 128 / 1024,
    free_floor_gb: 2,
    check_every: 16,
    write_delay_ms: 50,
    ...over,
  };
}

function makeLog(over: Partial<EventLogConfig> = {}, deps: Partial<EventLogDeps> = {}): EventLog {
  return new EventLog({
    config: config(over),
    logger: silentLogger(),
    disk: new FakeDisk(100 * GiB),
    clock: { now: () => Date.UTC(2025, 0, 1) },
    ...deps,
  });
}

async function activeLines(): Promise<string[]> {
  const text = await readFile(join(dir, "events.jsonl"), "utf8");
  return text.split("\n").filter(Boolean);
}

async function archivedSeqs(): Promise<number[]> {
  const names = (await readdir(dir)).filter((n) => n.startsWith("archive-")).sort();
  const seqs: number[] = [];
  for (const n of names) {
    const text = gunzipSync(await readFile(join(dir, n))).toString("utf8");
    for (const line of text.split("\n").filter(Boolean)) {
      seqs.push(EventRecordSchema.parse(JSON.parse(line)).seq);
    }
  }
  return seqs;
}

/** Real files that count the writes. */
class CountingFiles implements EventFiles {
  writes = 0;
  async openAppend(path: string): Promise<AppendHandle> {
    const real = await nodeFiles.openAppend(path);
    return {
      append: (data) => {
        this.writes++;
        return real.append(data);
      },
      truncate: (len) => real.truncate(len),
      close: () => real.close(),
    };
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("EventLog", () => {
  it("gathers records for write_delay_ms into one write; readers and stop() see them before it", async () => {
    const files = new CountingFiles();
    const log = makeLog({ write_delay_ms: 200 }, { files });
    await log.start();
    for (let i = 1; i <= 5; i++) log.append(failed(i));
    await sleep(50);
    for (let i = 6; i <= 8; i++) log.append(failed(i));
    await sleep(50);
    expect(files.writes).toBe(0);
    expect((await log.read()).map((r) => r.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    await expect.poll(() => files.writes, { timeout: 5000 }).toBe(1);
    expect(await activeLines()).toHaveLength(8);
    // A record queued just before stop() is written by it, not lost to the pending timer.
    log.append(failed(9));
    await log.stop();
    expect(files.writes).toBe(2);
    expect(await activeLines()).toHaveLength(9);
  });

  it("with write_delay_ms 0 writes each append at once", async () => {
    const files = new CountingFiles();
    await using log = makeLog({ write_delay_ms: 0 }, { files });
    await log.start();
    log.append(failed(1));
    await sleep(50);
    log.append(failed(2));
    await expect.poll(() => files.writes, { timeout: 5000 }).toBe(2);
    expect(await activeLines()).toHaveLength(2);
  });

  it("stores each event as one validated JSON line, in append order, and reads newest last", async () => {
    await using log = makeLog();
    await log.start();
    for (let i = 1; i <= 10; i++) log.append(failed(i));
    await log.flush();

    const lines = await activeLines();
    expect(lines).toHaveLength(10);
    const first = EventRecordSchema.parse(JSON.parse(lines[0] as string));
    expect(first).toEqual({
      seq: 1,
      at: 1_700_000_000_001,
      session_id: "s1",
      index: 1,
      type: "TaskFailed",
      event: { type: "TaskFailed", task_id: "t1", reason: "instance lost" },
    });

    const all = await log.read();
    expect(all.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect((await log.read({ limit: 3 })).map((r) => r.seq)).toEqual([8, 9, 10]);
    expect((await log.read({ after_seq: 7 })).map((r) => r.seq)).toEqual([8, 9, 10]);
    expect((await log.read({ after_seq: 2, limit: 2 })).map((r) => r.seq)).toEqual([9, 10]);
    expect(log.usage()).toMatchObject({
      mode: "normal",
      records_written: 10,
      records_counted_only: 0,
      active_bytes: (await stat(join(dir, "events.jsonl"))).size,
    });
  });

  it("reads records that are still queued in memory together with those on disk", async () => {
    await using log = makeLog();
    await log.start();
    log.append(failed(1));
    log.append(bulky(2));
    await log.flush();
    log.append(failed(3));
    log.append(bulky(4));
    const records = await log.read({ type: "NodeLeft" });
    expect(records.map((r) => r.seq)).toEqual([2, 4]);
    expect((await log.read()).map((r) => r.index)).toEqual([1, 2, 3, 4]);
  });

  it("keeps records across a restart and continues the sequence", async () => {
    const first = makeLog();
    await first.start();
    for (let i = 1; i <= 5; i++) first.append(failed(i));
    await first.stop();

    await using second = makeLog();
    expect((await second.read()).map((r) => r.seq)).toEqual([1, 2, 3, 4, 5]);
    await second.start();
    second.append(failed(6));
    await second.flush();
    const records = await second.read();
    expect(records.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(records.at(-1)?.index).toBe(6);
  });

  it("cuts a torn last line left by a crash mid-write", async () => {
    const first = makeLog();
    await first.start();
    for (let i = 1; i <= 3; i++) first.append(failed(i));
    await first.stop();
    await appendFile(join(dir, "events.jsonl"), '{"seq":4,"at":1,"sess');

    await using second = makeLog();
    await second.start();
    second.append(failed(4));
    await second.flush();
    const lines = await activeLines();
    expect(lines.map((l) => (JSON.parse(l) as { seq: number }).seq)).toEqual([1, 2, 3, 4]);
  });

  it("buffers appends made before start and writes them once started", async () => {
    await writeFile(join(dir, "events.jsonl"), "");
    await using log = makeLog();
    log.append(failed(1));
    log.append(failed(2));
    await log.start();
    await log.flush();
    expect((await log.read()).map((r) => r.index)).toEqual([1, 2]);
  });

  it("compacts above the threshold into archives, keeping the newest records and losing none", async () => {
    await using log = makeLog({ archive_total_mb: 10 });
    await log.start();
    let index = 0;
    for (let round = 0; round < 12; round++) {
      for (let i = 0; i < 50; i++) log.append(bulky(++index));
      await log.flush();
      expect(log.usage().active_bytes).toBeLessThanOrEqual(64 * KiB + 50 * 500);
    }
    const usage = log.usage();
    expect(usage.archive_files).toBeGreaterThan(1);
    expect(usage.records_written).toBe(600);

    const active = (await activeLines()).map((l) => EventRecordSchema.parse(JSON.parse(l)).seq);
    const archived = await archivedSeqs();
    expect([...archived, ...active]).toEqual(Array.from({ length: 600 }, (_, i) => i + 1));
    expect(active.at(-1)).toBe(600);

    const recent = await log.read({ limit: 5000 });
    expect(recent.map((r) => r.seq)).toEqual(active);
    expect(recent.length).toBeGreaterThanOrEqual(100);
    expect((await readdir(dir)).filter((n) => n.endsWith(".tmp"))).toEqual([]);
  });

  it("rotates archives so their total stays under archive_total_mb, oldest first", async () => {
    await using log = makeLog();
    await log.start();
    let index = 0;
    for (let round = 0; round < 40; round++) {
      for (let i = 0; i < 50; i++) log.append(bulky(++index));
      await log.flush();
    }
    const usage = log.usage();
    expect(usage.archive_bytes).toBeLessThanOrEqual(128 * KiB);
    expect(usage.archive_bytes).toBeGreaterThan(0);
    const names = (await readdir(dir)).filter((n) => n.startsWith("archive-"));
    expect(names).toHaveLength(usage.archive_files);
    let total = 0;
    for (const n of names) total += (await stat(join(dir, n))).size;
    expect(total).toBe(usage.archive_bytes);
    // The oldest records are gone, what remains is contiguous up to the newest.
    const archived = await archivedSeqs();
    const active = (await activeLines()).map((l) => EventRecordSchema.parse(JSON.parse(l)).seq);
    const kept = [...archived, ...active];
    expect(kept[0]).toBeGreaterThan(1);
    expect(kept).toEqual(Array.from({ length: kept.length }, (_, i) => (kept[0] as number) + i));
    expect(kept.at(-1)).toBe(2000);
  });

  it("recovers seq from the archives when the active file is gone", async () => {
    const first = makeLog({ archive_total_mb: 10 });
    await first.start();
    for (let i = 1; i <= 400; i++) first.append(bulky(i));
    await first.stop();
    await rm(join(dir, "events.jsonl"));

    await using second = makeLog({ archive_total_mb: 10 });
    await second.start();
    second.append(failed(401));
    await second.flush();
    const [last] = await second.read({ limit: 1 });
    expect(last?.seq).toBeGreaterThan(1);
    expect(last?.seq).toBe(Math.max(...(await archivedSeqs())) + 1);
  });

  it("starts in counting-only mode when free disk is at the floor, and returns above floor + 10%", async () => {
    const disk = new FakeDisk(2 * GiB);
    await using log = makeLog({ check_every: 4 }, { disk });
    await log.start();
    expect(log.usage().mode).toBe("counting-only");
    expect(log.usage().last_free_check).toEqual({ free_bytes: 2 * GiB, at: Date.UTC(2025, 0, 1) });

    log.append(failed(1));
    log.append(bulky(2));
    log.append(bulky(3));
    await log.flush();
    expect(log.usage()).toMatchObject({
      mode: "counting-only",
      records_written: 0,
      records_counted_only: 3,
      counted_by_type: { TaskFailed: 1, NodeLeft: 2 },
    });
    expect(await log.read()).toEqual([]);

    // Inside the hysteresis margin: stays degraded.
    disk.free = 2.1 * GiB;
    log.append(failed(4)); // 4th append since the last check -> check
    await expect.poll(() => disk.checks).toBe(2);
    expect(log.usage().mode).toBe("counting-only");

    disk.free = 3 * GiB;
    for (let i = 5; i <= 8; i++) log.append(failed(i));
    await expect.poll(() => log.usage().mode).toBe("normal");
    log.append(failed(9));
    await log.flush();
    expect((await log.read()).map((r) => r.index)).toEqual([9]);
    expect(log.usage()).toMatchObject({ records_written: 1, records_counted_only: 8 });
  });

  it("degrades while running when a periodic check finds free disk at the floor", async () => {
    const disk = new FakeDisk(50 * GiB);
    await using log = makeLog({ check_every: 8 }, { disk });
    await log.start();
    for (let i = 1; i <= 7; i++) log.append(failed(i));
    await log.flush();
    disk.free = 1 * GiB;
    log.append(failed(8));
    await expect.poll(() => log.usage().mode).toBe("counting-only");
    for (let i = 9; i <= 12; i++) log.append(failed(i));
    await log.flush();
    expect(log.usage().records_counted_only).toBeGreaterThanOrEqual(4);
    expect(log.usage().records_written + log.usage().records_counted_only).toBe(12);
  });

  it("switches to counting-only on ENOSPC without a torn line, and back after a healthy check", async () => {
    const files = new FlakyFiles();
    const disk = new FakeDisk(50 * GiB);
    const log = makeLog({ check_every: 5 }, { files, disk });
    await log.start();
    for (let i = 1; i <= 5; i++) log.append(failed(i)); // 5th append -> check, plenty free
    await log.flush();
    await expect.poll(() => disk.checks).toBe(2);

    files.failWith = enospc;
    expect(() => {
      log.append(bulky(6));
      log.append(bulky(7));
    }).not.toThrow();
    await log.flush();
    expect(log.usage()).toMatchObject({
      mode: "counting-only",
      records_written: 5,
      records_counted_only: 2,
      counted_by_type: { NodeLeft: 2 },
    });
    const lines = await activeLines();
    expect(lines).toHaveLength(5);
    for (const line of lines) expect(() => JSON.parse(line) as unknown).not.toThrow();

    files.failWith = null;
    for (let i = 8; i <= 10; i++) log.append(failed(i)); // 10th append -> check finds 50 GiB free
    await expect.poll(() => log.usage().mode).toBe("normal");
    expect(log.usage().counted_by_type).toEqual({ NodeLeft: 2, TaskFailed: 3 });
    log.append(failed(11));
    await log.stop();

    await using reopened = makeLog();
    await reopened.start();
    const records = await reopened.read();
    expect(records.map((r) => r.index)).toEqual([1, 2, 3, 4, 5, 11]);
    // seq 6 and 7 went to the failed write; counted-only records get none.
    expect(records.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5, 8]);
  });

  it("starts the next write on a fresh line when a partial write cannot be cut", async () => {
    const files = new FlakyFiles();
    const log = makeLog({}, { files });
    await log.start();
    log.append(failed(1));
    await log.flush();
    files.failWith = () => Object.assign(new Error("EIO"), { code: "EIO" });
    files.truncateFails = true;
    log.append(bulky(2));
    await log.flush();
    files.failWith = null;
    log.append(failed(3));
    await log.stop();
    expect(log.usage()).toMatchObject({ mode: "normal", records_written: 2, records_dropped: 1 });

    await using reopened = makeLog();
    await reopened.start();
    expect((await reopened.read()).map((r) => r.index)).toEqual([1, 3]);
  });

  it("never throws from append: before start, after stop, on failing disk checks", async () => {
    const disk = new FakeDisk(50 * GiB);
    disk.error = new Error("statfs failed");
    const log = makeLog({ check_every: 1 }, { disk });
    expect(() => log.append(failed(1))).not.toThrow();
    await log.start();
    expect(log.usage().last_free_check).toBeNull();
    expect(() => log.append(failed(2))).not.toThrow();
    await log.stop();
    await log.stop();
    expect(() => log.append(failed(3))).not.toThrow();
    expect(log.usage()).toMatchObject({ mode: "normal", records_written: 2, records_dropped: 1 });
  });

  it("drops the oldest queued records beyond maxPending instead of growing without bound", async () => {
    await using log = makeLog({}, { maxPending: 10 });
    await log.start();
    for (let i = 1; i <= 25; i++) log.append(failed(i));
    await log.flush();
    const records = await log.read();
    expect(records.at(-1)?.index).toBe(25);
    expect(log.usage().records_written + log.usage().records_dropped).toBe(25);
  });

  it("does not rewrite the file on every append when keep_events records alone exceed the threshold", async () => {
    await using log = makeLog({ compact_above_mb: 2048 / MiB, keep_events: 100 });
    await log.start();
    for (let i = 1; i <= 30; i++) log.append(bulky(i));
    await log.flush();
    expect(log.usage().archive_files).toBe(0);
    expect((await log.read()).length).toBe(30);
  });
});
