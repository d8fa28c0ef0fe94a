// The worker side of one simulated node for bench/scale: what services/node feeds the cluster agent's
// heartbeat (telemetry, measured links, local runners, loop delay), without hardware, probes or engines.
// Shapes and refresh rates follow node.ts: telemetry and links are refreshed once per heartbeat period
// (links: every live peer, as LinkProber measures them, with noise), runners follow the replica's assignments.
import { monitorEventLoopDelay } from "node:perf_hooks";
import type { IntervalHistogram } from "node:perf_hooks";
import type { ClusterAgent } from "@ic/cluster";
import type { Gpu, Heartbeat, Link, Runner, Telemetry } from "@ic/protocol";
import { RttWindows } from "@ic/worker";

const GB = 1024 ** 3;

/** GPU classes a node draws from (name, VRAM per GPU); one or two GPUs each. */
const GPU_CLASSES: readonly (readonly [string, number])[] = [
  ["NVIDIA GeForce RTX 4090", 24],
  ["NVIDIA RTX A6000", 48],
  ["NVIDIA A100-SXM4-80GB", 80],
  ["NVIDIA H100 80GB HBM3", 80],
];

/** The process's event-loop delay, sampled once per heartbeat period like the node's LoopMonitor. */
export class LoopDelay {
  private readonly h: IntervalHistogram = monitorEventLoopDelay({ resolution: 10 });
  private maxEver = 0;
  private last = { p99_ms: 0, max_ms: 0, max_ever_ms: 0 };

  start(): void {
    this.h.enable();
  }
  stop(): void {
    this.h.disable();
  }
  /** Rolls the window (call once per heartbeat period). */
  roll(): void {
    const max = this.h.max / 1e6;
    this.maxEver = Math.max(this.maxEver, max);
    const r = (x: number) => Math.round(x * 100) / 100;
    this.last = {
      p99_ms: r(this.h.percentile(99) / 1e6),
      max_ms: r(max),
      max_ever_ms: r(this.maxEver),
    };
    this.h.reset();
  }
  get sample(): { p99_ms: number; max_ms: number; max_ever_ms: number } {
    return this.last;
  }
}

export interface StandInOptions {
  /** Index of the node in the cluster (names its address). */
  readonly index: number;
  readonly random: () => number;
  readonly heartbeatMs: number;
  readonly loop: LoopDelay;
}

export class WorkerStandIn {
  readonly host: string;
  private agent: ClusterAgent | undefined;
  private readonly gpus: Gpu[];
  private readonly total: number;
  private telemetry: Telemetry;
  private links: Link[] = [];
  /** Each peer's round trip without noise. */
  private readonly baseRtt = new Map<string, number>();
  private readonly windows = new RttWindows();
  private timer: NodeJS.Timeout | undefined;
  private readonly engine: Telemetry["engine"];

  constructor(private readonly o: StandInOptions) {
    this.host = `10.1.${o.index >> 8}.${o.index & 255}`;
    const [model, vram] = GPU_CLASSES[Math.floor(o.random() * GPU_CLASSES.length)]!;
    const count = o.random() < 0.3 ? 2 : 1;
    this.total = count * vram * GB;
    this.gpus = Array.from({ length: count }, () => ({
      vendor: "NVIDIA",
      model,
      vram_total_bytes: vram * GB,
      vram_free_bytes: vram * GB,
    }));
    const dir = "/root/.cache/inference-cluster/engine/b6970-cuda";
    this.engine = {
      server_bin: `${dir}/llama-server`,
      rpc_bin: `${dir}/ggml-rpc-server`,
      backend: "cuda",
      usable: true,
      overridden: false,
    };
    this.telemetry = this.read();
  }

  /** The agent whose replica and live peers the runners and links come from. */
  attach(agent: ClusterAgent): void {
    this.agent = agent;
  }

  start(): void {
    this.timer = setInterval(() => this.refresh(), this.o.heartbeatMs);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Heartbeats seen back on the bus (node.ts hands these to its telemetry queue). */
  confirmed = 0;
  lastConfirmedSentAt = 0;
  published(sentAt: number): void {
    this.confirmed++;
    this.lastConfirmedSentAt = sentAt;
  }

  /** What node.ts's `extras` returns: the latest readings and measured links, the local runners. */
  extras() {
    return {
      loop_delay: this.o.loop.sample,
      telemetry: this.telemetry,
      links: this.links,
      runners: this.runners().map((r) => ({
        instance_id: r.instance_id,
        rank: r.rank,
        state: r.state,
        ...(r.endpoint ? { endpoint: r.endpoint } : {}),
      })),
      health: [] as Heartbeat["health"],
    };
  }

  /** The ranks the replica assigns to this node, as a worker would run them once ready. */
  runners(now = Date.now()): Runner[] {
    const a = this.agent;
    const id = a?.nodeId;
    if (!a || !id) return [];
    const out: Runner[] = [];
    for (const i of Object.values(a.snapshot().instances)) {
      for (const s of i.assignments) {
        if (s.node_id !== id) continue;
        out.push({
          instance_id: i.instance_id,
          node_id: id,
          rank: s.rank,
          state: "RunnerReady",
          endpoint: s.rank === 0 ? `http://${this.host}:8100` : `${this.host}:${50052 + s.rank}`,
          restarts: 0,
          since: now,
        });
      }
    }
    return out;
  }

  /** One telemetry reading and one round of link measurements (node.ts does both per period). */
  private refresh(): void {
    this.telemetry = this.read();
    const self = this.agent?.peerKey;
    const r = this.o.random;
    // As LinkProber measures a LAN: a round trip of its own per peer (0.15-0.75 ms), noise of
    // ±0.1 ms on each measurement, and now and then (2%) a late answer of 1-5 ms more (a busy
    // event loop on either side); reported, as LinkProber does, as the median of the last few.
    const measured = new Map<string, number>();
    for (const p of this.agent?.livePeers() ?? []) {
      const peer = p.heartbeat.peer_key;
      if (peer === self) continue;
      let base = this.baseRtt.get(peer);
      if (base === undefined) {
        base = 0.15 + r() * 0.6;
        this.baseRtt.set(peer, base);
      }
      const late = r() < 0.02 ? 1 + r() * 4 : 0;
      measured.set(peer, Math.round((base + (r() - 0.5) * 0.2 + late) * 100) / 100);
    }
    this.links = this.windows.update(measured);
  }

  private read(): Telemetry {
    const r = this.o.random;
    const gpus = this.gpus.map((g) => ({
      ...g,
      vram_free_bytes: Math.round((g.vram_total_bytes ?? 0) * (0.9 + r() * 0.07)),
    }));
    return {
      memory_total_bytes: this.total,
      memory_free_bytes: gpus.reduce((s, g) => s + (g.vram_free_bytes ?? 0), 0),
      gpus,
      disk_free_bytes: Math.round((500 + r() * 1500) * GB),
      engine: this.engine,
      declared_backend: "auto",
    };
  }
}
