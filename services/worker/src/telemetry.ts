// Periodic readings of this node's memory, GPUs and disk, plus the engine's capability, and the
// nodeHealth entries derived from them; the samples go through a small bounded queue to the heartbeat
// (telemetry-queue.ts).
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
import {
  TelemetryQueue,
  type TelemetryKind,
  type TelemetryQueueOptions,
  type TelemetrySamples,
} from "./telemetry-queue.ts";

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
