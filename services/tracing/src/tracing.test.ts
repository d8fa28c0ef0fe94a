// The tracing service's queue: nothing is written while a request runs, finished requests are
// gathered for writeDelayMs and written together, a full queue drops (and counts) rather than
// grows, and stop() writes what is still queued.
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { ChatEvent } from "@ic/protocol";
import type { TaskId } from "@ic/protocol";
import { silentLogger } from "@ic/log";
import { Tracing } from "./tracing.ts";

const T0 = 1_763_900_000_000;

function events(taskId: string): ChatEvent[] {
  return [
    { type: "validated", at: T0 + 1, model: "m", stream: false },
    { type: "task", at: T0 + 2, taskId: taskId as TaskId },
    { type: "headers", at: T0 + 3, status: 200 },
    { type: "end", at: T0 + 4, ok: true, status: 200, code: undefined, message: undefined },
  ];
}

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "tracing-queue-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const make = (o: { writeDelayMs: number; maxPending?: number }) =>
  new Tracing({
    config: { enabled: true, retention_days: 3, dir },
    log: silentLogger(),
    node: "node-1",
    ...o,
  });

describe("Tracing queue", () => {
  it("writes nothing while a request runs, then its trace within writeDelayMs of its end", async () => {
    await using tracing = make({ writeDelayMs: 100 });
    await tracing.start();
    const obs = tracing.observe({ commandId: "c-1", receivedAt: T0, path: "/v1/chat/completions" })!;
    const [validated, task, headers, end] = events("t-1");
    for (const e of [validated!, task!, headers!]) obs.event(e);
    await new Promise((r) => setTimeout(r, 150));
    expect(await readdir(dir)).toEqual([]);
    const ended = Date.now();
    obs.event(end!);
    // Gathered with the others for a while, never written in the observer's call.
    expect(await readdir(dir)).toEqual([]);
    expect(tracing.status().pending).toBe(1);
    await expect
      .poll(() => readdir(dir), { timeout: 2000, interval: 10 })
      .toEqual([`${T0}_t-1.json`]);
    expect(Date.now() - ended).toBeGreaterThanOrEqual(90);
  });

  it("hands a full batch over at once, without waiting for the delay", async () => {
    await using tracing = make({ writeDelayMs: 60_000 });
    await tracing.start();
    for (let i = 0; i < 64; i++) {
      const obs = tracing.observe({ commandId: `c-${i}`, receivedAt: T0 + i, path: "/v1/chat/completions" })!;
      for (const e of events(`t-${i}`)) obs.event(e);
    }
    await expect.poll(() => tracing.status().written, { timeout: 5000 }).toBe(64);
  });

  it("drops and counts traces beyond maxPending; stop() writes the queued ones", async () => {
    const tracing = make({ writeDelayMs: 60_000, maxPending: 2 });
    await tracing.start();
    for (const id of ["t-a", "t-b", "t-c"]) {
      const obs = tracing.observe({ commandId: id, receivedAt: T0, path: "/v1/chat/completions" })!;
      for (const e of events(id)) obs.event(e);
    }
    expect(tracing.status()).toMatchObject({ pending: 2, dropped: 1, written: 0 });
    await tracing.stop();
    expect((await readdir(dir)).sort()).toEqual([`${T0}_t-a.json`, `${T0}_t-b.json`]);
    expect(tracing.status()).toMatchObject({ pending: 0, dropped: 1, written: 2 });
    // Stopped: no more observers.
    expect(tracing.observe({ commandId: "c", receivedAt: T0, path: "/v1/chat/completions" })).toBeUndefined();
  });
});
