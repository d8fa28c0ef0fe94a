// bench/gateway's settings (from the environment), its targets, and the shapes of what its runs
// measure, shared by the run (main.ts) and the report (report.ts).

/** Rounds per pass at concurrency 1 and at 16; each round runs one batch per path. */
export const ROUNDS_1 = Number(process.env.BENCH_ROUNDS_1 ?? 60);
export const ROUNDS_16 = Number(process.env.BENCH_ROUNDS_16 ?? 12);
/** Times the rounds are repeated; the spread of the per-pass figures is reported. */
export const PASSES = Number(process.env.BENCH_PASSES ?? 3);
/** Requests per path before measuring: the node's JavaScript runs optimized only after many calls. */
export const WARMUP = Number(process.env.BENCH_WARMUP ?? 500);
/** How long the hops' idle CPU rate is read, before the warm-up and after the last pass. */
export const IDLE_MS = 3000;

/**
 * One engine thread, and a slot per request of the concurrency-16 batch: with llama-server's automatic
 * 4 slots, a batch of 16 runs in four waves and its median TTFT falls on the boundary between the
 * second and the third (tens of ms apart), which swamped the gateway's own part of it.
 */
export const ENGINE_ARGS = "-t 1 -tb 1 -np 16";

/**
 * The targets against the bare Node proxy (the floor), per concurrency: the throughput ratio, the TTFT
 * added to the floor's, and the CPU per request as a multiple of the floor's. Concurrency 1: issue 32;
 * 16: issue 48 (a burst of 16 streams starting together, as on a GPU).
 */
export const TARGETS: Record<number, { throughput: number; ttftMs: number; cpuRatio: number }> = {
  1: { throughput: 0.98, ttftMs: 0.5, cpuRatio: 1.5 },
  16: { throughput: 0.98, ttftMs: 1, cpuRatio: 1.3 },
};

/**
 * BENCH_ENGINE=stand-in: bench/lib/stand-in-engine.mjs instead of llama-server, streaming
 * BENCH_STAND_IN_TPS tokens per second per stream (3000 by default: a GPU's rate), so the engine's
 * own speed leaves our path exposed.
 */
export const STAND_IN_MODE = process.env.BENCH_ENGINE === "stand-in";
export const STAND_IN_TPS = Number(process.env.BENCH_STAND_IN_TPS ?? 3000);

export const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;

/** The three paths' indexes: the floor proxy and the gateway; and nats-server's among the hops. */
export const FLOOR = 1;
export const GATEWAY = 2;
export const NATS = 2;

export interface Path {
  name: string;
  url: string;
  headers: Record<string, string>;
}

export interface Pass {
  ratio: number;
  delta: number;
  /** CPU ms of each hop over the pass's rounds (idle not yet removed) and the rounds' wall ms. */
  cpu: number[];
  /** The same, of the hop's main threads only (event loops; GC and I/O helpers left out). */
  cpuMain: number[];
  wall: number;
  requests: number;
}

/** Every pass at one concurrency: each path's TTFTs and tok/s, and gateway vs floor per round. */
export interface AtConcurrency {
  c: number;
  got: { ttft: number[]; tps: number[] }[];
  ratios: number[];
  deltas: number[];
  passes: Pass[];
}
