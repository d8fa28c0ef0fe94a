// The master's log and the sync pages cut from it: bounds, the snapshot decision, and the parts.
import { describe, expect, it } from "vitest";
import { emptyState } from "@ic/protocol";
import type { ControlState, IndexedEvent, ModelId, SessionId } from "@ic/protocol";
import { MasterLog } from "./master-log.ts";
import { SnapshotAssembler, SyncServer } from "./replica-sync.ts";

const session = "s-1" as SessionId;
function ev(index: number, reason = "r"): IndexedEvent {
  return {
    index,
    session_id: session,
    at: index,
    event:
      index === 1
        ? {
            type: "SessionStarted",
            session: {
              session_id: session,
              master_node_id: "n-1" as never,
              master_peer_key: "p",
              master_started_at: 0,
              started_at: 0,
            },
            members: [],
            models: [],
            instances: [],
            runners: [],
            deployments: [],
            intent_restored: true,
          }
        : {
            type: "DownloadFailed",
            node_id: "n-1" as never,
            model_id: "org/m" as ModelId,
            reason,
          },
  };
}
const size = (e: IndexedEvent) => Buffer.byteLength(JSON.stringify(e));
function logOf(n: number, bounds = { retainEvents: 1000, retainBytes: 1e9 }): MasterLog {
  const log = new MasterLog(bounds);
  for (let i = 1; i <= n; i++) log.append(ev(i), size(ev(i)));
  return log;
}

describe("MasterLog", () => {
  it("pages consecutive events under the budget, from any index it holds", () => {
    const log = logOf(100);
    const one = size(ev(5));
    const page = log.page(5, one * 3 + 3)!;
    expect(page.map((e) => e.index)).toEqual([5, 6, 7]);
    expect(log.page(101, 1e6)).toEqual([]);
    expect(log.page(99, 1e6)!.map((e) => e.index)).toEqual([99, 100]);
  });

  it("has no page where the first event alone is over the budget", () => {
    const log = logOf(3);
    expect(log.page(2, 10)).toBeUndefined();
  });

  it.each([
    { what: "count", bounds: { retainEvents: 10, retainBytes: 1e9 } },
    { what: "bytes", bounds: { retainEvents: 1e6, retainBytes: size(ev(2)) * 10 } },
  ])("stays within twice its bound by $what, keeping the newest events", ({ bounds }) => {
    const log = new MasterLog(bounds);
    for (let i = 1; i <= 500; i++) {
      log.append(ev(i), size(ev(i)));
      expect(log.size.events).toBeLessThanOrEqual(bounds.retainEvents * 2);
      expect(log.size.bytes).toBeLessThanOrEqual(bounds.retainBytes * 2);
      expect(log.last - log.first + 1).toBe(log.size.events);
    }
    expect(log.last).toBe(500);
    expect(log.size.events).toBeGreaterThanOrEqual(9);
    expect(log.page(1, 1e6)).toBeUndefined();
  });

  it("a SessionStarted starts a new log", () => {
    const log = logOf(50);
    log.append(ev(1), size(ev(1)));
    expect(log.first).toBe(1);
    expect(log.last).toBe(1);
  });
});

describe("SyncServer", () => {
  function server(n: number, o: { budget?: number; gap?: number; state?: ControlState } = {}) {
    const log = logOf(n);
    const state = o.state ?? { ...emptyState(), index: n };
    return {
      log,
      sync: new SyncServer(log, () => state, {
        budgetBytes: o.budget ?? 4096,
        snapshotGap: o.gap ?? 100,
      }),
    };
  }

  it.each([
    { from: 60, expect: "events" },
    { from: 200, expect: "events" }, // past the end: an empty page
    { from: 2, expect: "snapshot" }, // further behind than the gap
  ])("from $from of 150 (gap 100): $expect", ({ from, expect: kind }) => {
    const { sync } = server(150);
    const r = sync.answer({ session_id: session, from_index: from });
    expect(r.last_index).toBe(150);
    expect(r.snapshot_part !== undefined ? "snapshot" : "events").toBe(kind);
  });

  it("serves a large state in parts under the budget, reusing one serialization for every follower", () => {
    const state: ControlState = { ...emptyState(), index: 10 };
    for (let i = 0; i < 200; i++)
      state.models[`org/m${i}`] = {
        model_id: `org/m${i}` as ModelId,
        file: "f.gguf",
        bytes: 1,
        architecture: "llama",
        layers: 1,
        context_length: 0,
        embedding_length: 1,
        head_count: 1,
        head_count_kv: 1,
        supports_tensor: false,
      };
    const { sync } = server(10, { budget: 4096, gap: 0, state });
    const a = new SnapshotAssembler();
    const b = new SnapshotAssembler();
    let got: ControlState | undefined;
    let parts = 0;
    for (;;) {
      const r = sync.answer({
        session_id: session,
        from_index: 1,
        ...(a.next() ? { snapshot: a.next()! } : {}),
      });
      expect(Buffer.byteLength(JSON.stringify(r))).toBeLessThanOrEqual(4096);
      // Another follower starting meanwhile gets the same snapshot's first part.
      if (parts === 3) {
        const other = sync.answer({ session_id: session, from_index: 1 });
        expect(other.snapshot_part).toMatchObject({ index: 10, part: 0 });
        expect(b.add(other.snapshot_part!)).toBeUndefined();
      }
      parts++;
      got = a.add(r.snapshot_part!);
      if (got) break;
    }
    expect(parts).toBeGreaterThan(5);
    expect(got).toEqual(state);
  });
});

describe("SnapshotAssembler", () => {
  const text = Buffer.from(JSON.stringify({ ...emptyState(), index: 7 }));
  const half = Math.ceil(text.length / 2);
  const part = (index: number, p: number) => ({
    index,
    part: p,
    parts: 2,
    data: text.subarray(p * half, (p + 1) * half).toString("base64"),
  });

  it("restarts when a part of another snapshot arrives, and ignores a transfer's middle", () => {
    const a = new SnapshotAssembler();
    expect(a.add(part(7, 0))).toBeUndefined();
    expect(a.next()).toEqual({ index: 7, part: 1 });
    // The master moved on to another snapshot: its part 0 restarts the transfer.
    expect(a.add(part(9, 0))).toBeUndefined();
    expect(a.next()).toEqual({ index: 9, part: 1 });
    // A part 1 out of the blue is dropped.
    const b = new SnapshotAssembler();
    expect(b.add(part(7, 1))).toBeUndefined();
    expect(b.next()).toBeUndefined();
    expect(a.add(part(9, 1))).toMatchObject({ index: 7 });
  });

  it("refuses a snapshot that is not a control state", () => {
    const a = new SnapshotAssembler();
    const bad = Buffer.from(JSON.stringify({ index: "x" })).toString("base64");
    expect(() => a.add({ index: 1, part: 0, parts: 1, data: bad })).toThrow(/invalid snapshot/);
  });
});
