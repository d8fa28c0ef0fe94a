// Periodic readings of this node's memory, GPUs and disk, plus the engine's capability, and the
// nodeHealth entries derived from them; the samples go through a small bounded queue to the heartbeat.
// Invariants of the queue (TelemetryQueue): at most one pending sample per kind (latest wins: a newer
// sample replaces the pending one, counted as coalesced), at most `capacity` pending in all (beyond
// it the oldest pending is dropped), at most `maxInFlight` samples taken by heartbeats and not yet
// seen back on the bus (beyond it, or after `confirmTimeoutMs`, they count as dropped). A heartbeat
// carries the last taken value of every kind, so a drop never empties a heartbeat; it only means a
// newer reading did not make it out. Every counter is monotonic; GET /v1/diagnostics/telemetry shows them.
import { execa } from "execa";
import { statfs } from "node:fs/promises";
import { existsSync, mkdirSync } from "node:fs";
import si from "systeminformation";
import type {
  EngineInfo,
  Gpu,
  HealthEntry,
  Link,
  Telemetry,
  TelemetryDiagnostics,
} from "@ic/protocol";
import { nodeHealth } from "@ic/engine";
import type { Logger } from "@ic/log";

export interface TelemetryOptions {
  readonly log: Logger;
  readonly engine: () => EngineInfo;
  readonly declaredBackend: "auto" | "cpu" | "cuda" | "metal";
  /** Directory whose filesystem is "the models volume". */
  readonly modelsPath: string;
  readonly intervalMs: number;
  /**
   * What this node offers the cluster (operators reserve memory; tests simulate small nodes): caps
   * the reported free and total memory (placement takes reservations off the total).
   */
  readonly memoryLimitBytes?: number | undefined;
  /** Wall clock of the queue (ms); the heartbeat's `sent_at` must come from the same clock. */
  readonly now?: () => number;
  readonly queue?: Partial<Omit<TelemetryQueueOptions, "now">>;
}

/** What a heartbeat carries from the telemetry path, one sample kind each. */
export interface TelemetrySamples {
  readonly readings: Telemetry;
  readonly health: HealthEntry[];
  readonly links: Link[];
}
export type TelemetryKind = keyof TelemetrySamples;
export const TELEMETRY_KINDS: readonly TelemetryKind[] = ["readings", "health", "links"];

export interface TelemetryQueueOptions {
  readonly now: () => number;
  /** Pending samples at most (one per kind); default: one slot per kind. */
  readonly capacity: number;
  /** Samples taken by heartbeats and not yet seen back on the bus, at most. */
  readonly maxInFlight: number;
  /** A taken sample whose heartbeat is not seen back within this long counts as dropped. */
  readonly confirmTimeoutMs: number;
  /** Latency samples the percentiles are taken over (the most recent ones). */
  readonly window: number;
}

/** Clock skew allowed between a heartbeat's `sent_at` and the moment it took its samples. */
const CONFIRM_SLACK_MS = 10;

interface Pending {
  readonly kind: TelemetryKind;
  readonly sampledAt: number;
  readonly admittedAt: number;
}
interface Taken extends Pending {
  readonly takenAt: number;
}
interface KindCounters {
  offered: number;
  admitted: number;
  rejected: number;
  coalesced: number;
  dropped: number;
  published: number;
  lastAdmittedAt: number | null;
  lastPublishedAt: number | null;
}

/** The most recent `size` values and the largest ever; percentiles by nearest rank. */
class LatencyWindow {
  private readonly values: number[] = [];
  private next = 0;
  private maxEver: number | null = null;

  constructor(private readonly size: number) {}

  add(ms: number): void {
    const v = Math.max(0, ms);
    if (this.values.length < this.size) this.values.push(v);
    else this.values[this.next] = v;
    this.next = (this.next + 1) % this.size;
    this.maxEver = this.maxEver === null ? v : Math.max(this.maxEver, v);
  }

  summary(): TelemetryDiagnostics["publish"]["latency"] {
    const sorted = [...this.values].sort((a, b) => a - b);
    const rank = (p: number) =>
      sorted.length === 0
        ? null
        : sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!;
    return {
      count: sorted.length,
      p50_ms: rank(0.5),
      p99_ms: rank(0.99),
      max_ms: sorted.length === 0 ? null : sorted[sorted.length - 1]!,
      max_ever_ms: this.maxEver,
    };
  }
}

/**
 * The telemetry path's bounded queue: samples are offered, admitted (latest wins per kind), taken
 * by a heartbeat, and published once that heartbeat is seen back on the bus. Pure bookkeeping over
 * an injected clock; the collector and the node wiring drive it.
 */
export class TelemetryQueue {
  private readonly o: TelemetryQueueOptions;
  private readonly pending = new Map<TelemetryKind, { meta: Pending; value: unknown }>();
  private readonly inFlight: Taken[] = [];
  /** The value of each kind the last heartbeat took (what heartbeats carry until a newer one). */
  private readonly current = new Map<TelemetryKind, unknown>();
  private readonly lastSampledAt = new Map<TelemetryKind, number>();
  private readonly kinds = new Map<TelemetryKind, KindCounters>();
  private readonly wait: LatencyWindow;
  private readonly latency: LatencyWindow;
  private stopped = false;
  private maxDepth = 0;
  private heartbeats = 0;
  private confirmedHeartbeats = 0;
  private lastPublishedAt: number | null = null;
  private readonly rejectedBy = { stale: 0, stopped: 0 };
  private readonly droppedBy = { overflow: 0, unconfirmed: 0, stopped: 0 };

  constructor(o: Partial<TelemetryQueueOptions> = {}) {
    this.o = {
      now: o.now ?? Date.now,
      capacity: o.capacity ?? TELEMETRY_KINDS.length,
      maxInFlight: o.maxInFlight ?? 4 * TELEMETRY_KINDS.length,
      confirmTimeoutMs: o.confirmTimeoutMs ?? 10_000,
      window: o.window ?? 512,
    };
    this.wait = new LatencyWindow(this.o.window);
    this.latency = new LatencyWindow(this.o.window);
  }

  private counters(kind: TelemetryKind): KindCounters {
    let k = this.kinds.get(kind);
    if (!k) {
      k = {
        offered: 0,
        admitted: 0,
        rejected: 0,
        coalesced: 0,
        dropped: 0,
        published: 0,
        lastAdmittedAt: null,
        lastPublishedAt: null,
      };
      this.kinds.set(kind, k);
    }
    return k;
  }

  /** Offers a sample taken at `sampledAt` (default now); false when it was not admitted. */
  offer<K extends TelemetryKind>(kind: K, value: TelemetrySamples[K], sampledAt?: number): boolean {
    const now = this.o.now();
    const at = sampledAt ?? now;
    const k = this.counters(kind);
    k.offered++;
    if (this.stopped) {
      k.rejected++;
      this.rejectedBy.stopped++;
      return false;
    }
    const newest = this.lastSampledAt.get(kind);
    if (newest !== undefined && at < newest) {
      k.rejected++;
      this.rejectedBy.stale++;
      return false;
    }
    this.lastSampledAt.set(kind, at);
    const prev = this.pending.get(kind);
    if (prev) {
      k.coalesced++;
      this.pending.delete(kind);
    } else if (this.pending.size >= this.o.capacity) {
      const [oldestKind, oldest] = [...this.pending.entries()].reduce((a, b) =>
        b[1].meta.admittedAt < a[1].meta.admittedAt ? b : a,
      );
      this.pending.delete(oldestKind);
      this.counters(oldest.meta.kind).dropped++;
      this.droppedBy.overflow++;
    }
    this.pending.set(kind, { meta: { kind, sampledAt: at, admittedAt: now }, value });
    k.admitted++;
    k.lastAdmittedAt = now;
    this.maxDepth = Math.max(this.maxDepth, this.pending.size);
    return true;
  }

  /**
   * A heartbeat takes every pending sample: the values it carries (the newest taken one of each
   * kind). The samples stay in flight until `confirm` sees that heartbeat back on the bus.
   */
  take(): Partial<TelemetrySamples> {
    const now = this.o.now();
    this.expire(now);
    if (this.pending.size > 0) {
      this.heartbeats++;
      for (const [kind, p] of this.pending) {
        this.current.set(kind, p.value);
        this.wait.add(now - p.meta.admittedAt);
        this.inFlight.push({ ...p.meta, takenAt: now });
      }
      this.pending.clear();
      while (this.inFlight.length > this.o.maxInFlight) this.dropInFlight(this.inFlight.shift()!);
    }
    return Object.fromEntries(this.current) as Partial<TelemetrySamples>;
  }

  /** This node's heartbeat sent at `sentAt` came back over the bus: what it took is published. */
  confirm(sentAt: number): void {
    const now = this.o.now();
    this.confirmedHeartbeats++;
    let i = 0;
    while (i < this.inFlight.length) {
      const t = this.inFlight[i]!;
      if (t.takenAt > sentAt + CONFIRM_SLACK_MS) {
        i++;
        continue;
      }
      this.inFlight.splice(i, 1);
      const k = this.counters(t.kind);
      k.published++;
      k.lastPublishedAt = now;
      this.lastPublishedAt = now;
      this.latency.add(now - t.admittedAt);
    }
    this.expire(now);
  }

  private expire(now: number): void {
    while (this.inFlight.length > 0 && now - this.inFlight[0]!.takenAt > this.o.confirmTimeoutMs)
      this.dropInFlight(this.inFlight.shift()!);
  }

  private dropInFlight(t: Taken): void {
    this.counters(t.kind).dropped++;
    this.droppedBy.unconfirmed++;
  }

  /** Later offers are refused; what is pending or in flight counts as dropped. */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    for (const p of this.pending.values()) this.counters(p.meta.kind).dropped++;
    for (const t of this.inFlight) this.counters(t.kind).dropped++;
    this.droppedBy.stopped += this.pending.size + this.inFlight.length;
    this.pending.clear();
    this.inFlight.length = 0;
  }

  snapshot(): Omit<TelemetryDiagnostics, "node" | "peer_key" | "heartbeat_ms" | "readings"> {
    const now = this.o.now();
    this.expire(now);
    const sum = (f: (k: KindCounters) => number) =>
      [...this.kinds.values()].reduce((s, k) => s + f(k), 0);
    const oldest = Math.min(...[...this.pending.values()].map((p) => p.meta.admittedAt));
    const dropped = this.droppedBy.overflow + this.droppedBy.unconfirmed + this.droppedBy.stopped;
    return {
      generated_at: now,
      admission: {
        offered: sum((k) => k.offered),
        admitted: sum((k) => k.admitted),
        rejected: { ...this.rejectedBy },
      },
      coalescing: { coalesced: sum((k) => k.coalesced) },
      drops: { total: dropped, ...this.droppedBy },
      queue: {
        capacity: this.o.capacity,
        depth: this.pending.size,
        max_depth: this.maxDepth,
        in_flight: this.inFlight.length,
        max_in_flight: this.o.maxInFlight,
        oldest_pending_age_ms: this.pending.size > 0 ? now - oldest : null,
      },
      publish: {
        published: sum((k) => k.published),
        heartbeats: this.heartbeats,
        confirmed_heartbeats: this.confirmedHeartbeats,
        last_published_at: this.lastPublishedAt,
        queue_wait: this.wait.summary(),
        latency: this.latency.summary(),
      },
      kinds: Object.fromEntries(
        TELEMETRY_KINDS.map((kind) => {
          const k = this.counters(kind);
          return [
            kind,
            {
              offered: k.offered,
              admitted: k.admitted,
              rejected: k.rejected,
              coalesced: k.coalesced,
              dropped: k.dropped,
              published: k.published,
              pending: this.pending.has(kind),
              last_admitted_at: k.lastAdmittedAt,
              last_published_at: k.lastPublishedAt,
            },
          ];
        }),
      ),
    };
  }
}

async function nvidiaGpus(): Promise<Gpu[] | null> {
  const r = await execa(
    "nvidia-smi",
    ["--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"],
    { reject: false, timeout: 5000 },
  ).catch(() => null);
  if (!r || r.exitCode !== 0) return null;
  return r.stdout
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => {
      const [name, total, free] = l.split(",").map((x) => x.trim());
      const mib = (v: string | undefined) =>
        v && /^\d+$/.test(v) ? Number(v) * 1024 * 1024 : null;
      return {
        vendor: "NVIDIA",
        model: name ?? "unknown",
        vram_total_bytes: mib(total),
        vram_free_bytes: mib(free),
      };
    });
}

/** Whether a discrete NVIDIA/AMD device is on the PCI bus, from systeminformation's controller list. */
async function gpuVisible(): Promise<{ visible: boolean; controllers: Gpu[] }> {
  try {
    const g = await si.graphics();
    const controllers = g.controllers
      .filter((c) => /nvidia|amd|advanced micro|apple/i.test(c.vendor ?? ""))
      .map((c) => ({
        vendor: c.vendor ?? "unknown",
        model: c.model ?? "unknown",
        vram_total_bytes: c.vram ? c.vram * 1024 * 1024 : null,
        vram_free_bytes: c.memoryFree ? c.memoryFree * 1024 * 1024 : null,
      }));
    return { visible: controllers.some((c) => !/apple/i.test(c.vendor)), controllers };
  } catch {
    return { visible: false, controllers: [] };
  }
}

/** The PCI device list does not change while a node runs; re-read it only this often. */
const GRAPHICS_REFRESH_MS = 60_000;

/** One reading of this node: what the heartbeat reports, and the health entries derived from it. */
export interface TelemetryReading {
  readonly telemetry: Telemetry;
  readonly health: HealthEntry[];
}

export class TelemetryCollector implements AsyncDisposable {
  private latest: Telemetry | null = null;
  private graphics: { at: number; value: Awaited<ReturnType<typeof gpuVisible>> } | undefined;
  /** When nvidia-smi may be asked again after it was missing or failed. */
  private nvidiaRetryAt = 0;
  private health: HealthEntry[] = [];
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private readonly now: () => number;
  private readonly queue: TelemetryQueue;
  private readonly readings = {
    completed: 0,
    failed: 0,
    skippedBusy: 0,
    lastDurationMs: null as number | null,
    maxDurationMs: null as number | null,
  };

  constructor(
    private readonly o: TelemetryOptions,
    /** Takes one reading; the host's by default (tests script it). */
    private readonly measure?: () => Promise<TelemetryReading>,
  ) {
    this.now = o.now ?? Date.now;
    this.queue = new TelemetryQueue({ ...o.queue, now: this.now });
  }

  /** The latest reading (the heartbeat carries what `heartbeatPart` hands it). */
  get telemetry(): Telemetry | null {
    return this.latest;
  }
  get nodeHealth(): HealthEntry[] {
    return this.health;
  }

  async start(): Promise<void> {
    await this.read();
    this.timer = setInterval(() => this.tick(), this.o.intervalMs);
  }

  /** One period: a new reading, unless the previous one is still running. */
  tick(): void {
    if (this.running) {
      this.readings.skippedBusy++;
      return;
    }
    this.running = this.read().finally(() => (this.running = undefined));
  }

  /** Offers a sample measured elsewhere (the link prober's) to the heartbeat's queue. */
  offer<K extends TelemetryKind>(kind: K, value: TelemetrySamples[K], sampledAt?: number): void {
    this.queue.offer(kind, value, sampledAt);
  }

  /**
   * What a heartbeat carries from the telemetry path: takes the pending samples (each kind keeps
   * its last taken value). Call `published` when that heartbeat is seen back on the bus.
   */
  heartbeatPart(): { telemetry: Telemetry | null; health: HealthEntry[]; links: Link[] } {
    const t = this.queue.take();
    return { telemetry: t.readings ?? null, health: t.health ?? [], links: t.links ?? [] };
  }

  /** This node's heartbeat with `sent_at` came back over the bus. */
  published(sentAt: number): void {
    this.queue.confirm(sentAt);
  }

  diagnostics(who: { node: string; peer_key: string }): TelemetryDiagnostics {
    const r = this.readings;
    return {
      node: who.node,
      peer_key: who.peer_key,
      heartbeat_ms: this.o.intervalMs,
      ...this.queue.snapshot(),
      readings: {
        completed: r.completed,
        failed: r.failed,
        skipped_busy: r.skippedBusy,
        last_duration_ms: r.lastDurationMs,
        max_duration_ms: r.maxDurationMs,
      },
    };
  }

  async read(): Promise<void> {
    const started = this.now();
    try {
      const r = await (this.measure ?? (() => this.measureHost()))();
      const done = this.now();
      this.latest = r.telemetry;
      this.health = r.health;
      this.readings.completed++;
      this.readings.lastDurationMs = done - started;
      this.readings.maxDurationMs = Math.max(this.readings.maxDurationMs ?? 0, done - started);
      this.queue.offer("readings", r.telemetry, started);
      this.queue.offer("health", r.health, started);
      this.o.log.debug(
        {
          component: "telemetry",
          duration_ms: done - started,
          free: r.telemetry.memory_free_bytes,
        },
        "telemetry reading",
      );
    } catch (e) {
      this.readings.failed++;
      this.o.log.warn({ err: e }, "telemetry reading failed");
    }
  }

  private async measureHost(): Promise<TelemetryReading> {
    const now = Date.now();
    if (!this.graphics || now - this.graphics.at > GRAPHICS_REFRESH_MS) {
      this.graphics = { at: now, value: await gpuVisible() };
    }
    const vis = this.graphics.value;
    // nvidia-smi is asked every period while it answers (free VRAM moves); where it is missing or
    // fails, again only after GRAPHICS_REFRESH_MS: a process spawn each period cost this node about
    // 1.5% of a core on a host without it (profile of bench/gateway).
    const askNvidia = now >= this.nvidiaRetryAt;
    const [mem, nv, disk] = await Promise.all([
      si.mem(),
      askNvidia ? nvidiaGpus() : null,
      this.diskFree(),
    ]);
    if (askNvidia && nv === null) this.nvidiaRetryAt = now + GRAPHICS_REFRESH_MS;
    const engine = this.o.engine();
    const gpus = nv ?? vis.controllers;
    const vramFree = gpus.reduce((s, g) => s + (g.vram_free_bytes ?? 0), 0);
    const vramTotal = gpus.reduce((s, g) => s + (g.vram_total_bytes ?? 0), 0);
    const onGpu = engine.backend === "cuda" && vramTotal > 0;
    let free = onGpu ? vramFree : mem.available;
    let total = onGpu ? vramTotal : mem.total;
    if (this.o.memoryLimitBytes !== undefined) {
      free = Math.min(free, this.o.memoryLimitBytes);
      total = Math.min(total, this.o.memoryLimitBytes);
    }
    return {
      telemetry: {
        memory_total_bytes: total,
        memory_free_bytes: free,
        gpus,
        disk_free_bytes: disk,
        engine,
        declared_backend: this.o.declaredBackend,
      },
      health: nodeHealth({
        gpus,
        gpuVisible: vis.visible || (nv?.length ?? 0) > 0,
        engine,
        declaredBackend: this.o.declaredBackend,
        platform: process.platform,
      }),
    };
  }

  private async diskFree(): Promise<number | null> {
    try {
      if (!existsSync(this.o.modelsPath)) mkdirSync(this.o.modelsPath, { recursive: true });
      const s = await statfs(this.o.modelsPath);
      return s.bavail * s.bsize;
    } catch {
      return null;
    }
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
    this.queue.stop();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
