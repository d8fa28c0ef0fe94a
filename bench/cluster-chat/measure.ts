// One step of bench/cluster-chat: the same closed-loop load straight to the engines (the baseline)
// and then through every gateway, with the CPU of every part and the cluster's counters over the
// gateway window, net of what the idle cluster spends in the same time.
import { performance } from "node:perf_hooks";
import { quantile } from "../lib/report.ts";
import { closedLoop } from "./load.ts";
import type { LoadResult } from "./load.ts";
import { counters } from "./cluster.ts";
import type { Bench, Counters } from "./cluster.ts";
import { machineBusyMs } from "../lib/proc.ts";
import { cpuSnapshot, cpuSpent } from "./procs.ts";
import type { Part } from "./procs.ts";

export const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 4);
export const WINDOW_S = Number(process.env.BENCH_WINDOW_S ?? 8);
const IDLE_S = Number(process.env.BENCH_IDLE_S ?? 4);

/** What the idle cluster spends per second: CPU ms per node and part, counters. */
export interface Idle {
  readonly cpu: Map<number, Record<Part, number>>;
  readonly counters: Counters;
  /** Cores the whole machine kept busy. */
  readonly machineCores: number;
}

const sum = (xs: readonly number[]) => xs.reduce((s, x) => s + x, 0);

function diff(a: Counters, b: Counters): Counters {
  const d = (x: readonly number[], y: readonly number[]) => y.map((v, i) => v - x[i]!);
  return {
    index: b.index - a.index,
    busMsgs: d(a.busMsgs, b.busMsgs),
    busBytes: d(a.busBytes, b.busBytes),
    logRecords: d(a.logRecords, b.logRecords),
    logBytes: d(a.logBytes, b.logBytes),
  };
}

function scale(c: Counters, k: number): Counters {
  const m = (x: readonly number[]) => x.map((v) => v * k);
  return {
    index: c.index * k,
    busMsgs: m(c.busMsgs),
    busBytes: m(c.busBytes),
    logRecords: m(c.logRecords),
    logBytes: m(c.logBytes),
  };
}

const pids = (b: Bench) => b.pids.map((p) => p.pid);

/** The idle cluster's CPU and counters, per second. */
export async function measureIdle(b: Bench): Promise<Idle> {
  await new Promise((r) => setTimeout(r, 1000));
  const c0 = await counters(b);
  const cpu0 = cpuSnapshot(pids(b));
  const m0 = machineBusyMs();
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, IDLE_S * 1000));
  const s = (performance.now() - t0) / 1000;
  const cpu = cpuSpent(cpu0, cpuSnapshot(pids(b)));
  const machineCores = (machineBusyMs() - m0) / (s * 1000);
  const c1 = await counters(b);
  for (const v of cpu.values()) for (const k of ["node", "bus", "engine"] as const) v[k] /= s;
  return { cpu, counters: scale(diff(c0, c1), 1 / s), machineCores };
}

export interface Step {
  readonly perGateway: number;
  readonly direct: LoadResult;
  readonly gateway: LoadResult;
  /** CPU ms per node and part over the gateway window, idle subtracted. */
  readonly cpu: Map<number, Record<Part, number>>;
  /** Counters over the gateway window, idle subtracted. */
  readonly counted: Counters;
  /** Cores the whole machine kept busy during the gateway window (nothing subtracted). */
  readonly machineCores: number;
}

/** One concurrency: `perGateway` requests at once on every gateway, and as many on the engines. */
export async function measureStep(b: Bench, perGateway: number, idle: Idle): Promise<Step> {
  const load = { model: b.modelId, maxTokens: MAX_TOKENS, ca: b.ca, seconds: WINDOW_S };
  const total = perGateway * b.gateways.length;
  const direct = await closedLoop({
    ...load,
    targets: b.engines,
    perTarget: Math.max(1, Math.round(total / b.engines.length)),
  });
  const c0 = await counters(b);
  const cpu0 = cpuSnapshot(pids(b));
  const m0 = machineBusyMs();
  const gateway = await closedLoop({ ...load, targets: b.gateways, perTarget: perGateway });
  const cpu = cpuSpent(cpu0, cpuSnapshot(pids(b)));
  const machineCores = (machineBusyMs() - m0) / (gateway.seconds * 1000);
  // Let the batched task reports of the window's last requests land before counting.
  await new Promise((r) => setTimeout(r, 600));
  const c1 = await counters(b);
  const s = gateway.seconds;
  for (const [pid, v] of cpu) {
    const i = idle.cpu.get(pid)!;
    for (const k of ["node", "bus", "engine"] as const) v[k] -= i[k] * s;
  }
  const counted = diff(scale(idle.counters, s), diff(c0, c1));
  return { perGateway, direct, gateway, cpu, counted, machineCores };
}

/** The figures of one step, per second and per request. */
export function figures(b: Bench, st: Step) {
  const g = st.gateway;
  const perReq = (x: number) => (g.ok > 0 ? x / g.ok : Number.NaN);
  const wall = g.seconds * 1000;
  const parts = b.pids.map((p) => st.cpu.get(p.pid)!);
  const master = parts[b.pids.findIndex((p) => p.master)]!;
  const followers = parts.filter((_, i) => !b.pids[i]!.master);
  const followerNode = followers.length ? sum(followers.map((f) => f.node)) / followers.length : 0;
  const nodeCpu = sum(parts.map((p) => p.node));
  const busCpu = sum(parts.map((p) => p.bus));
  const engineCpu = sum(parts.map((p) => p.engine));
  const directP99 = quantile(st.direct.latencies, 0.99);
  const p99 = quantile(g.latencies, 0.99);
  return {
    total: st.perGateway * b.gateways.length,
    directRate: st.direct.ok / st.direct.seconds,
    directP50: quantile(st.direct.latencies, 0.5),
    directP99,
    rate: g.ok / g.seconds,
    p50: quantile(g.latencies, 0.5),
    p99,
    addedP99: p99 - directP99,
    failed: g.failed + st.direct.failed,
    failures: [...st.direct.failures, ...g.failures],
    masterCore: master.node / wall,
    followerCore: followerNode / wall,
    masterOwnCore: (master.node - followerNode) / wall,
    nodeCpuPerReq: perReq(nodeCpu),
    busCpuPerReq: perReq(busCpu),
    engineCpuPerReq: perReq(engineCpu),
    clientCpuPerReq: perReq(g.clientCpuMs),
    events: perReq(st.counted.index),
    busMsgs: perReq(sum(st.counted.busMsgs)),
    busBytes: perReq(sum(st.counted.busBytes)),
    logRecords: perReq(sum(st.counted.logRecords) / b.pids.length),
    logBytes: perReq(sum(st.counted.logBytes) / b.pids.length),
    /** Requests per second per core our path (nodes and their nats-servers) would carry alone. */
    perCore: g.ok / ((nodeCpu + busCpu) / 1000),
    machineCores: st.machineCores,
  };
}

export type Figures = ReturnType<typeof figures>;
