import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { TelemetryDiagnosticsSchema } from "@ic/protocol";
import type { HealthEntry, Telemetry } from "@ic/protocol";
import { silentLogger } from "@ic/log";
import { TelemetryCollector } from "./telemetry.ts";
import { TelemetryQueue } from "./telemetry-queue.ts";
import type { TelemetryReading } from "./telemetry.ts";

/** A settable clock. */
function fakeClock(start = 1_000_000) {
  let t = start;
  return {
    now: () => t,
    advance: (ms: number) => {
      t += ms;
    },
  };
}

const reading = (free: number): Telemetry => ({
  memory_total_bytes: 1000,
  memory_free_bytes: free,
  gpus: [],
  disk_free_bytes: 5000,
  engine: {
    server_bin: "/bin/llama-server",
    rpc_bin: null,
    backend: "cpu",
    usable: true,
    overridden: false,
  },
  declared_backend: "auto",
});
const health: HealthEntry[] = [];

describe("TelemetryQueue", () => {
  it("admits samples, takes them into a heartbeat and publishes them when the heartbeat comes back", () => {
    const clock = fakeClock();
    const q = new TelemetryQueue({ now: clock.now });
    expect(q.offer("readings", reading(10))).toBe(true);
    expect(q.offer("health", health)).toBe(true);
    expect(q.snapshot().queue.depth).toBe(2);
    clock.advance(300);
    const sentAt = clock.now();
    const part = q.take();
    expect(part.readings?.memory_free_bytes).toBe(10);
    let s = q.snapshot();
    expect(s.queue).toMatchObject({ depth: 0, max_depth: 2, in_flight: 2 });
    expect(s.publish).toMatchObject({ published: 0, heartbeats: 1 });
    expect(s.publish.queue_wait).toMatchObject({ count: 2, p50_ms: 300, max_ms: 300 });
    clock.advance(4);
    q.confirm(sentAt);
    s = q.snapshot();
    expect(s.admission).toEqual({ offered: 2, admitted: 2, rejected: { stale: 0, stopped: 0 } });
    expect(s.queue.in_flight).toBe(0);
    expect(s.publish).toMatchObject({
      published: 2,
      confirmed_heartbeats: 1,
      last_published_at: clock.now(),
    });
    expect(s.publish.latency).toMatchObject({ count: 2, p50_ms: 304, p99_ms: 304, max_ms: 304 });
    expect(s.kinds.readings).toMatchObject({ offered: 1, admitted: 1, published: 1 });
  });

  it("keeps the latest sample of a kind: a pending one replaced before a heartbeat is coalesced", () => {
    const clock = fakeClock();
    const q = new TelemetryQueue({ now: clock.now });
    q.offer("readings", reading(1));
    clock.advance(100);
    q.offer("readings", reading(2));
    clock.advance(100);
    q.offer("readings", reading(3));
    const s = q.snapshot();
    expect(s.coalescing.coalesced).toBe(2);
    expect(s.queue.depth).toBe(1);
    expect(s.queue.oldest_pending_age_ms).toBe(0);
    expect(q.take().readings?.memory_free_bytes).toBe(3);
    // Only the sample that was sent waited: 0 ms (the coalesced ones never count as published).
    expect(q.snapshot().publish.queue_wait).toMatchObject({ count: 1, max_ms: 0 });
  });

  it("a heartbeat keeps carrying the last value of a kind when nothing new is pending", () => {
    const q = new TelemetryQueue({ now: fakeClock().now });
    q.offer("links", [{ peer_key: "p-b", rtt_ms: 0.4 }]);
    expect(q.take().links).toEqual([{ peer_key: "p-b", rtt_ms: 0.4 }]);
    expect(q.take().links).toEqual([{ peer_key: "p-b", rtt_ms: 0.4 }]);
    // A heartbeat that took nothing is not counted as one that published samples.
    expect(q.snapshot().publish.heartbeats).toBe(1);
  });

  it("rejects a sample older than the newest one of its kind (a slow reading finishing late)", () => {
    const clock = fakeClock();
    const q = new TelemetryQueue({ now: clock.now });
    q.offer("readings", reading(2), clock.now());
    expect(q.offer("readings", reading(1), clock.now() - 50)).toBe(false);
    q.take();
    expect(q.offer("readings", reading(0), clock.now() - 10)).toBe(false);
    const s = q.snapshot();
    expect(s.admission).toMatchObject({ offered: 3, admitted: 1, rejected: { stale: 2 } });
    expect(s.kinds.readings?.rejected).toBe(2);
  });

  it("stays within its capacity: beyond it the oldest pending sample is dropped", () => {
    const clock = fakeClock();
    const q = new TelemetryQueue({ now: clock.now, capacity: 2 });
    q.offer("readings", reading(1));
    clock.advance(1);
    q.offer("health", health);
    clock.advance(1);
    q.offer("links", []);
    const s = q.snapshot();
    expect(s.queue).toMatchObject({ depth: 2, max_depth: 2, capacity: 2 });
    expect(s.drops).toMatchObject({ total: 1, overflow: 1 });
    expect(s.kinds.readings).toMatchObject({ dropped: 1, pending: false });
    expect(Object.keys(q.take()).sort()).toEqual(["health", "links"]);
  });

  it("counts samples as dropped when their heartbeat never comes back over the bus", () => {
    const clock = fakeClock();
    const q = new TelemetryQueue({ now: clock.now, confirmTimeoutMs: 5000 });
    q.offer("readings", reading(1));
    const lost = clock.now();
    q.take();
    clock.advance(6000);
    expect(q.snapshot().drops).toMatchObject({ total: 1, unconfirmed: 1 });
    // A late echo of that heartbeat publishes nothing twice.
    q.confirm(lost);
    expect(q.snapshot().publish.published).toBe(0);
  });

  it("bounds what is in flight while the bus does not echo heartbeats", () => {
    const clock = fakeClock();
    const q = new TelemetryQueue({ now: clock.now, maxInFlight: 3 });
    for (let i = 0; i < 5; i++) {
      q.offer("readings", reading(i));
      q.take();
      clock.advance(100);
    }
    const s = q.snapshot();
    expect(s.queue.in_flight).toBe(3);
    expect(s.drops.unconfirmed).toBe(2);
    // The echo of the newest heartbeat publishes everything taken up to it.
    q.confirm(clock.now());
    expect(q.snapshot().publish.published).toBe(3);
    expect(q.snapshot().queue.in_flight).toBe(0);
  });

  it("an echo confirms only the heartbeats sent up to it", () => {
    const clock = fakeClock();
    const q = new TelemetryQueue({ now: clock.now });
    q.offer("readings", reading(1));
    const first = clock.now();
    q.take();
    clock.advance(2000);
    q.offer("readings", reading(2));
    q.take();
    q.confirm(first);
    const s = q.snapshot();
    expect(s.publish.published).toBe(1);
    expect(s.queue.in_flight).toBe(1);
  });

  it("refuses offers once stopped and drops what was pending or in flight", () => {
    const q = new TelemetryQueue({ now: fakeClock().now });
    q.offer("readings", reading(1));
    q.take();
    q.offer("health", health);
    q.stop();
    expect(q.offer("links", [])).toBe(false);
    const s = q.snapshot();
    expect(s.drops).toMatchObject({ total: 2, stopped: 2 });
    expect(s.admission.rejected.stopped).toBe(1);
  });

  it("reports percentiles over the most recent window", () => {
    const clock = fakeClock();
    const q = new TelemetryQueue({ now: clock.now, window: 100 });
    for (let i = 1; i <= 200; i++) {
      q.offer("readings", reading(i));
      clock.advance(i);
      const sent = clock.now();
      q.take();
      q.confirm(sent);
    }
    const w = q.snapshot().publish.queue_wait;
    expect(w.count).toBe(100);
    expect(w.p50_ms).toBe(150);
    expect(w.p99_ms).toBe(199);
    expect(w.max_ms).toBe(200);
    expect(w.max_ever_ms).toBe(200);
  });
});

describe("TelemetryCollector", () => {
  const options = (clock: ReturnType<typeof fakeClock>) => ({
    log: silentLogger(),
    engine: () => reading(0).engine,
    declaredBackend: "auto" as const,
    modelsPath: "/tmp",
    intervalMs: 2000,
    now: clock.now,
  });

  it("offers every reading to the heartbeat path and describes it in its diagnostics", async () => {
    const clock = fakeClock();
    let n = 0;
    const c = new TelemetryCollector(options(clock), async (): Promise<TelemetryReading> => {
      clock.advance(25);
      return { telemetry: reading(++n), health };
    });
    await c.read();
    await c.read();
    c.offer("links", [{ peer_key: "p-b", rtt_ms: 1 }]);
    const sentAt = clock.now();
    const part = c.heartbeatPart();
    expect(part.telemetry?.memory_free_bytes).toBe(2);
    expect(part.links).toHaveLength(1);
    c.published(sentAt);
    const d = TelemetryDiagnosticsSchema.parse(c.diagnostics({ node: "a", peer_key: "p-a" }));
    expect(d).toMatchObject({ node: "a", peer_key: "p-a", heartbeat_ms: 2000 });
    expect(d.admission.admitted).toBe(5);
    expect(d.coalescing.coalesced).toBe(2);
    expect(d.publish.published).toBe(3);
    expect(d.readings).toMatchObject({ completed: 2, failed: 0, last_duration_ms: 25 });
  });

  it("counts a period skipped while the previous reading still runs, and a failed reading", async () => {
    const clock = fakeClock();
    let release!: () => void;
    let calls = 0;
    const c = new TelemetryCollector(options(clock), async () => {
      calls++;
      if (calls === 2) throw new Error("nvidia-smi hung");
      await new Promise<void>((r) => (release = r));
      return { telemetry: reading(1), health };
    });
    c.tick();
    c.tick();
    c.tick();
    release();
    await c.stop();
    c.tick();
    await c.stop();
    const d = c.diagnostics({ node: "a", peer_key: "p-a" });
    expect(d.readings).toMatchObject({ completed: 1, failed: 1, skipped_busy: 2 });
    // The first reading's samples were pending when the path stopped.
    expect(d.drops.stopped).toBe(2);
  });
});

describe("host readings ask nvidia-smi only while it answers", () => {
  /** Runs three host readings with a scripted nvidia-smi first on PATH; returns its VRAM queries. */
  async function queries(script: string): Promise<{ count: number; gpus: Telemetry["gpus"] }> {
    const dir = await mkdtemp(join(tmpdir(), "fake-nvidia-"));
    const calls = join(dir, "calls");
    await writeFile(
      join(dir, "nvidia-smi"),
      `#!/bin/sh\ncase "$*" in *--query-gpu=name,memory.total,memory.free*) echo q >> ${calls};; esac\n${script}\n`,
      { mode: 0o755 },
    );
    const path = process.env["PATH"];
    process.env["PATH"] = `${dir}:${path ?? ""}`;
    try {
      const c = new TelemetryCollector({
        log: silentLogger(),
        engine: () => reading(1).engine,
        declaredBackend: "auto",
        modelsPath: dir,
        intervalMs: 60_000,
      });
      for (let i = 0; i < 3; i++) await c.read();
      const gpus = c.telemetry?.gpus ?? [];
      await c.stop();
      const count = (await readFile(calls, "utf8").catch(() => ""))
        .split("\n")
        .filter(Boolean).length;
      return { count, gpus };
    } finally {
      process.env["PATH"] = path;
      await rm(dir, { recursive: true, force: true });
    }
  }

  it("a failing nvidia-smi is asked once, not every period", async () => {
    expect((await queries("exit 9")).count).toBe(1);
  });

  it("an answering nvidia-smi is asked every period and its GPUs are reported", async () => {
    const r = await queries('echo "NVIDIA H100, 81559, 80000"');
    expect(r.count).toBe(3);
    expect(r.gpus).toEqual([
      {
        vendor: "NVIDIA",
        model: "NVIDIA H100",
        vram_total_bytes: 81559 * 1024 * 1024,
        vram_free_bytes: 80000 * 1024 * 1024,
      },
    ]);
  });
});
