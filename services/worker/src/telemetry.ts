// Periodic readings of this node's memory, GPUs and disk, plus the engine's capability, and the
// nodeHealth entries derived from them. Readings are cached; the heartbeat reads the latest copy.
import { execa } from "execa";
import { statfs } from "node:fs/promises";
import { existsSync, mkdirSync } from "node:fs";
import si from "systeminformation";
import type { EngineInfo, Gpu, HealthEntry, Telemetry } from "@ic/protocol";
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

export class TelemetryCollector implements AsyncDisposable {
  private latest: Telemetry | null = null;
  private graphics: { at: number; value: Awaited<ReturnType<typeof gpuVisible>> } | undefined;
  private health: HealthEntry[] = [];
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(private readonly o: TelemetryOptions) {}

  get telemetry(): Telemetry | null {
    return this.latest;
  }
  get nodeHealth(): HealthEntry[] {
    return this.health;
  }

  async start(): Promise<void> {
    await this.read();
    this.timer = setInterval(() => {
      this.running ??= this.read().finally(() => (this.running = undefined));
    }, this.o.intervalMs);
  }

  async read(): Promise<void> {
    try {
      const now = Date.now();
      if (!this.graphics || now - this.graphics.at > GRAPHICS_REFRESH_MS) {
        this.graphics = { at: now, value: await gpuVisible() };
      }
      const vis = this.graphics.value;
      const [mem, nv, disk] = await Promise.all([si.mem(), nvidiaGpus(), this.diskFree()]);
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
      this.latest = {
        memory_total_bytes: total,
        memory_free_bytes: free,
        gpus,
        disk_free_bytes: disk,
        engine,
        declared_backend: this.o.declaredBackend,
      };
      this.health = nodeHealth({
        gpus,
        gpuVisible: vis.visible || (nv?.length ?? 0) > 0,
        engine,
        declaredBackend: this.o.declaredBackend,
        platform: process.platform,
      });
    } catch (e) {
      this.o.log.warn({ err: e }, "telemetry reading failed");
    }
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
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
