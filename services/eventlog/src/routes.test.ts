// GET /events through app.request(): query validation at the edge, the { mode, usage, records } body,
// and errors reaching the app's error handler as ServiceErrors (formatted here like the gateway does).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Hono } from "hono";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { errorBody, GiB, httpStatusFor, IndexedEventSchema, ServiceError } from "@ic/protocol";
import type { ErrorBody } from "@ic/protocol";
import { silentLogger } from "@ic/log";
import { FakeDisk } from "./disk.ts";
import { EventLog } from "./event-log.ts";
import type { EventsResponse } from "./routes.ts";
import { eventRoutes } from "./routes.ts";

let dir: string;
let log: EventLog;
let app: Hono;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "eventlog-routes-"));
  log = new EventLog({
    config: {
      dir,
      compact_above_mb: 1,
      keep_events: 100,
      archive_total_mb: 1,
      free_floor_gb: 2,
      check_every: 1024,
      write_delay_ms: 50,
    },
    logger: silentLogger(),
    disk: new FakeDisk(10 * GiB),
    clock: { now: () => 1_700_000_000_000 },
  });
  await log.start();
  for (let i = 1; i <= 6; i++) {
    log.append(
      IndexedEventSchema.parse({
        index: i,
        session_id: "s1",
        at: 1_700_000_000_000 + i,
        event:
          i % 2 === 0
            ? { type: "TaskFailed", task_id: `t${i}`, reason: "instance lost" }
            : { type: "NodeLeft", node_id: "n1", reason: "gone" },
      }),
    );
  }
  await log.flush();
  app = new Hono();
  app.onError((err, c) => {
    const e = err instanceof ServiceError ? err : new ServiceError("internal", "internal error");
    return c.json(errorBody(e), httpStatusFor(e.code));
  });
  eventRoutes(app, log);
});

afterEach(async () => {
  await log.stop();
  await rm(dir, { recursive: true, force: true });
});

describe("GET /events", () => {
  it("returns mode, usage and the most recent records, newest last", async () => {
    const res = await app.request("/events");
    expect(res.status).toBe(200);
    const body = (await res.json()) as EventsResponse;
    expect(body.mode).toBe("normal");
    expect(body.usage).toMatchObject({ mode: "normal", records_written: 6, archive_files: 0 });
    expect(body.records.map((r) => r.seq)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(body.records[1]).toEqual({
      seq: 2,
      at: 1_700_000_000_002,
      session_id: "s1",
      index: 2,
      type: "TaskFailed",
      event: { type: "TaskFailed", task_id: "t2", reason: "instance lost" },
    });
  });

  it("filters by limit, after_seq and type", async () => {
    const get = async (q: string): Promise<number[]> => {
      const res = await app.request(`/events?${q}`);
      expect(res.status).toBe(200);
      return ((await res.json()) as EventsResponse).records.map((r) => r.seq);
    };
    expect(await get("limit=2")).toEqual([5, 6]);
    expect(await get("after_seq=4")).toEqual([5, 6]);
    expect(await get("type=TaskFailed")).toEqual([2, 4, 6]);
    expect(await get("type=TaskFailed&limit=2&after_seq=1")).toEqual([4, 6]);
    expect(await get("type=DownloadFailed")).toEqual([]);
  });

  it.each([
    ["limit=0", "limit"],
    ["limit=5001", "limit"],
    ["limit=abc", "limit"],
    ["limit=1.5", "limit"],
    ["after_seq=-1", "after_seq"],
    ["after_seq=x", "after_seq"],
    ["type=NoSuchEvent", "type"],
  ])("rejects %s as invalid_request naming %s", async (q, param) => {
    const res = await app.request(`/events?${q}`);
    expect(res.status).toBe(400);
    const body = (await res.json()) as ErrorBody;
    expect(body.error.code).toBe("invalid_request");
    expect(body.error.message).toContain(param);
  });
});
