// How the control plane scales: n simulated nodes on this machine (10, 25, 50, 100 by default), each
// a real ClusterAgent on its own connection to a real bus (a few nats-servers clustered by routes),
// fed by a worker stand-in (stand-in.ts). The most senior agents (the master and its successors) run
// alone in their own processes, so their CPU is measured on its own; the rest share a few processes.
// Per size: convergence after all join, steady-state bus traffic and CPU, message and state sizes,
// then SIGKILL of the master's process (several times) -> every survivor in one new session without it.
// Reports only (no figure is asserted); writes "## Control plane at scale" to docs/benchmarks.md.
// Settings (env): BENCH_SIZES (10,25,50,100), BENCH_SERVERS (4), BENCH_PER_HOST (25), BENCH_KILLS (3),
// BENCH_FAST_KILLS (2), BENCH_SETTLE_S (6), BENCH_WINDOW_S (20), BENCH_INSTANCES_PER_NODE (0.25);
// BENCH_PROFILE=<dir>: CPU profiles of the master (join, steady state), of one shared process and of
// the first successor's takeover (summarize them with bench/lib/profile-summary.ts); BENCH_DEBUG: how long each
// survivor took after the election; BENCH_LOG_LEVEL / BENCH_LOG_SAMPLE / BENCH_VERBOSE: the agents'
// log lines (counted per phase; sampled or shown); BENCH_REPORT: write the section elsewhere.
import { randomUUID } from "node:crypto";
import { mkdirSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { clusterCredentials } from "@ic/config";
import { stateDocument } from "@ic/gateway";
import type { ClusterView } from "@ic/protocol";
import { cpuMs } from "../lib/streaming.ts";
import { writeSection } from "../lib/report.ts";
import { BenchBus, rate } from "./bus.ts";
import { AgentHost, StatusBoard } from "./hosts.ts";
import { report } from "./report.ts";
import {
  FAST_KILLS,
  INSTANCES_PER_NODE,
  KILLS,
  PER_HOST,
  PROFILE_DIR,
  SERVERS,
  SETTLE_S,
  SIZES,
  TIMINGS,
  WINDOW_S,
} from "./settings.ts";
import type { KillSample, Lag, Result } from "./settings.ts";
import type { AgentSpec, AgentStatus, AgentView } from "./wire.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Credentials = ReturnType<typeof clusterCredentials>;
type Done = Awaited<ReturnType<StatusBoard["until"]>>;

/**
 * The agents of size `n` and their processes: the master candidate and its successors alone
 * (seniority = process start), the rest shared, up to PER_HOST a process.
 */
function layoutOf(n: number, urls: readonly string[], servers: number) {
  const base = Date.now();
  const specs: AgentSpec[] = Array.from({ length: n }, (_, i) => ({
    index: i,
    name: `node-${String(i + 1).padStart(3, "0")}`,
    peerKey: `p-${randomUUID()}`,
    // Seniority = process start: agent 0 is the master candidate, 1..KILLS its successors.
    startedAt: base + i,
    natsUrl: urls[i % urls.length]!,
  }));
  const seniors = Math.min(KILLS + FAST_KILLS + 1, n - 1);
  const groups: AgentSpec[][] = specs.slice(0, seniors).map((s) => [s]);
  const rest = specs.slice(seniors);
  const hostsForRest = Math.max(1, Math.ceil(rest.length / PER_HOST));
  for (let h = 0; h < hostsForRest; h++) {
    groups.push(rest.filter((_, i) => i % hostsForRest === h));
  }
  const layout = `${seniors} × 1 (master + successors) + ${hostsForRest} × ${Math.ceil(rest.length / hostsForRest)}, ${servers} nats-servers`;
  return { specs, seniors, groups, layout };
}

/** Every host process gets its agents, the bus credentials and the timings. */
async function initHosts(
  hosts: readonly AgentHost[],
  creds: Credentials,
  n: number,
): Promise<void> {
  await Promise.all(
    hosts.map((h, i) =>
      h.ask(
        {
          t: "init",
          agents: [...h.agents],
          user: creds.busClient.user,
          password: creds.busClient.password,
          timings: TIMINGS,
          seed: n * 1000 + i,
        },
        "ready",
      ),
    ),
  );
}

/** The agents of one size: their host processes, the board of their statuses, every index. */
interface Fleet {
  hosts: readonly AgentHost[];
  board: StatusBoard;
  all: readonly number[];
}

/** Join: every agent starts, the master candidate first, until all are in one session of all. */
async function joinPhase(n: number, { hosts, board, all }: Fleet, layout: string) {
  const master = hosts[0]!;
  const cpu0 = master.cpu();
  if (PROFILE_DIR) master.send({ t: "profile-start" });
  const t0 = Date.now();
  for (const h of hosts) h.send({ t: "start" });
  const joined = await board.until(
    all,
    {
      ok: (s) => s.synced && s.members === n,
      together: (ss) => new Set(ss.map((s) => s.session)).size === 1,
    },
    60_000,
    `${n} agents in one session of ${n}`,
  );
  const masterJoinCpu = master.cpu() - cpu0;
  if (PROFILE_DIR) await profile(master, `n${n}-master-join`);
  const join = joined.at - t0;
  const session0 = joined.statuses[0]!.session!;
  const elected = board.masterSince.get(session0)! - t0;
  const joinLogs = await logCounts(hosts);
  console.log(`n=${n}: joined in ${join} ms (${layout})`, joinLogs);
  return { join, elected, masterJoinCpu, session0 };
}

/** Workload: instances placed through the master, runners reported by their nodes; then settle. */
async function workloadPhase(n: number, hosts: readonly AgentHost[]) {
  const instances = Math.floor(n * INSTANCES_PER_NODE);
  const work = await hosts[0]!.ask({ t: "workload", instances }, "workload", 120_000);
  const reported = await Promise.all(
    hosts.map((h) => h.ask({ t: "report-runners", index: work.index }, "runners")),
  );
  const runners = reported.reduce((s, r) => s + r.reported, 0);
  console.log(`n=${n}: placed ${work.placed} instances, ${runners} runners reported`);
  await sleep(SETTLE_S * 1000);
  return { placed: work.placed, refused: work.refused, runners };
}

/** Steady state: CPU, bus traffic and heartbeat lag over WINDOW_S; the sizes of messages and state. */
async function steadyPhase(n: number, hosts: readonly AgentHost[], bus: BenchBus, seniors: number) {
  const master = hosts[0]!;
  const cpuA = hosts.map((h) => h.cpu());
  const natsA = bus.pids.map((pid) => procCpu(pid));
  const busA = await bus.counters();
  const sampleHost = hosts[hosts.length - 1]!;
  if (PROFILE_DIR) {
    master.send({ t: "profile-start" });
    sampleHost.send({ t: "profile-start" });
  }
  await logCounts(hosts);
  await lagOf(hosts);
  const w0 = performance.now();
  await sleep(WINDOW_S * 1000);
  const busB = await bus.counters();
  const steadyLogs = await logCounts(hosts);
  const lagAlone = await lagOf(hosts.slice(1, seniors));
  const lagShared = await lagOf(hosts.slice(seniors));
  const seconds = (performance.now() - w0) / 1000;
  const cpuB = hosts.map((h) => h.cpu());
  const natsB = bus.pids.map((pid) => procCpu(pid));
  if (PROFILE_DIR) {
    await profile(master, `n${n}-master-steady`);
    await profile(sampleHost, `n${n}-host-steady`);
  }
  const pct = (ms: number) => (ms / (seconds * 1000)) * 100;
  const masterPct = pct(cpuB[0]! - cpuA[0]!);
  const othersMs = cpuB.slice(1).reduce((s, x, i) => s + x - cpuA[i + 1]!, 0);
  const perNodePct = pct(othersMs) / (n - 1);
  const seniorFollowerPct = pct(cpuB[1]! - cpuA[1]!);
  const natsPct = pct(natsB.reduce((s, x, i) => s + x - natsA[i]!, 0));
  const busRate = rate(busA, busB, seconds);
  const sf = await hosts[hosts.length - 1]!.ask({ t: "sizes" }, "sizes");
  const doc = stateDocument(clusterView(sf.sizes.view), sf.sizes.view.name, Date.now());
  const stateDoc = Buffer.byteLength(JSON.stringify(doc));
  const stateDocLinks = Buffer.byteLength(JSON.stringify(doc.topology.links));
  console.log(
    `n=${n}: master ${masterPct.toFixed(2)}% of a core, per node ${perNodePct.toFixed(2)}%, ` +
      `bus ${busRate.published.toFixed(0)} msg/s in, ${busRate.delivered.toFixed(0)} out; ` +
      `heartbeat ${sf.sizes.heartbeat} B, /state ${stateDoc} B`,
    steadyLogs,
  );
  return {
    bus: busRate,
    masterPct,
    perNodePct,
    natsPct,
    seniorFollowerPct,
    sizesFollower: sf.sizes,
    stateDoc,
    stateDocLinks,
    lagAlone,
    lagShared,
  };
}

/** BENCH_DEBUG: how long each survivor took after the election. */
function debugKill(board: StatusBoard, session: string, tk: number, done: Done): void {
  const e = board.masterSince.get(session)!;
  const steps = board.history.filter((h) => h.session === session && h.at >= tk);
  const firstIn = new Map<number, AgentStatus>();
  for (const h of steps) if (!firstIn.has(h.i)) firstIn.set(h.i, h);
  const q = (xs: number[]) => {
    const s = xs.sort((a, b) => a - b);
    return [0.1, 0.5, 0.9, 1].map((p) => s[Math.min(s.length - 1, Math.floor(p * s.length))]);
  };
  console.log(
    "kill: elected",
    e - tk,
    "first status in new session (after election) p10/50/90/max",
    q([...firstIn.values()].map((h) => h.at - e)),
    "of which unsynced first",
    [...firstIn.values()].filter((h) => !h.synced).length,
    "final p10/50/90/max",
    q(done.statuses.map((h) => h.at - e)),
  );
}

/**
 * Who must converge after a kill: the `alive` agents, in a session not among `oldSessions` (the
 * new one is added to it).
 */
interface Survivors {
  alive: readonly number[];
  oldSessions: Set<string>;
}

/**
 * Kill k: SIGKILL of hosts[k] (the master) at a random point of the heartbeat cycle, until the
 * `alive` agents are synced in one new session without it; the first KILLS by the timeouts alone.
 */
async function killOnce(
  n: number,
  k: number,
  { hosts, board }: Fleet,
  { alive, oldSessions }: Survivors,
): Promise<KillSample> {
  const victim = hosts[k]!;
  const successor = hosts[k + 1]!;
  const v = victim.agents[0]!;
  // A random point of the heartbeat cycle.
  await sleep(Math.random() * TIMINGS.heartbeatMs);
  const c0 = successor.cpu();
  const profiling = PROFILE_DIR !== undefined && k === 0;
  if (profiling) successor.send({ t: "profile-start" });
  const fast = k >= KILLS;
  await lagOf(hosts);
  const tk = Date.now();
  victim.kill();
  if (fast)
    for (const h of hosts.slice(k + 1))
      h.send({ t: "connection-lost", peerKey: v.peerKey, startedAt: v.startedAt });
  const heard = await successor.ask({ t: "heard", peerKey: v.peerKey }, "heard");
  const done = await board.until(
    alive,
    {
      ok: (s) => s.synced && s.clean && s.members === alive.length && !oldSessions.has(s.session!),
      together: (ss) => new Set(ss.map((s) => s.session)).size === 1,
    },
    30_000,
    `survivors in one new session after killing ${victim.label}`,
  );
  const successorCpu = successor.cpu() - c0;
  const killLag = await lagOf(hosts);
  if (profiling) await profile(successor, `n${n}-successor-takeover`);
  const session = done.statuses[0]!.session!;
  oldSessions.add(session);
  const sample: KillSample = {
    lagMax: killLag.max,
    fast,
    converged: done.at - tk,
    elected: board.masterSince.get(session)! - tk,
    silentAtKill: heard.at === null ? null : tk - heard.at,
    successorCpu,
  };
  const killLogs = await logCounts(hosts);
  if (process.env.BENCH_DEBUG) debugKill(board, session, tk, done);
  console.log(`n=${n}: kill ${k + 1}: converged in ${done.at - tk} ms`, killLogs);
  return sample;
}

/** Kills: the master's process, then its successor's, ... */
async function killPhase(
  n: number,
  fleet: Fleet,
  seniors: number,
  session0: string,
): Promise<KillSample[]> {
  const { hosts, board, all } = fleet;
  const kills: KillSample[] = [];
  const gone: string[] = [];
  const oldSessions = new Set([session0]);
  let alive = [...all];
  for (let k = 0; k < seniors - 1; k++) {
    const victim = hosts[k]!;
    const v = victim.agents[0]!;
    if (!board.latest.get(v.index)?.master) throw new Error(`${victim.label} is not the master`);
    gone.push(v.peerKey);
    alive = alive.filter((i) => i !== v.index);
    await Promise.all(
      hosts.slice(k + 1).map((h) => h.ask({ t: "watch", gone: [...gone] }, "watching")),
    );
    kills.push(await killOnce(n, k, fleet, { alive, oldSessions }));
    await sleep(2000);
  }
  return kills;
}

async function runSize(n: number, secret: string): Promise<Result> {
  const load0 = loadavg()[0]!;
  const creds = clusterCredentials(secret);
  const servers = Math.min(SERVERS, n);
  await using bus = await BenchBus.start(servers, {
    client: creds.busClient,
    route: creds.busRoute,
  });
  const urls = bus.servers.map((s) => s.clientUrl);
  const { specs, seniors, groups, layout } = layoutOf(n, urls, servers);
  const board = new StatusBoard();
  const hosts = groups.map(
    (g, i) => new AgentHost(i < seniors ? `senior-${i}` : `host-${i - seniors}`, g, board.update),
  );
  try {
    await initHosts(hosts, creds, n);
    const fleet: Fleet = { hosts, board, all: specs.map((s) => s.index) };
    const { session0, ...joined } = await joinPhase(n, fleet, layout);
    const work = await workloadPhase(n, hosts);
    const steady = await steadyPhase(n, hosts, bus, seniors);
    const kills = await killPhase(n, fleet, seniors, session0);
    return {
      n,
      layout,
      ...joined,
      ...work,
      ...steady,
      kills,
      slowConsumers: (await bus.counters()).slowConsumers,
      load: [load0, loadavg()[0]!],
    };
  } finally {
    await Promise.all(hosts.map((h) => h.stop()));
  }
}

/** Log lines by message over every live host since the last call. */
async function logCounts(hosts: readonly AgentHost[]): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  const replies = await Promise.all(
    hosts.filter((h) => h.alive).map((h) => h.ask({ t: "logs" }, "logs")),
  );
  for (const r of replies)
    for (const [k, v] of Object.entries(r.counts)) out[k] = (out[k] ?? 0) + v;
  return out;
}

/** Heartbeat delivery lag over the given live hosts since the last call: p99 of the worst, max. */
async function lagOf(hosts: readonly AgentHost[]): Promise<Lag> {
  const r = await Promise.all(hosts.filter((h) => h.alive).map((h) => h.ask({ t: "lag" }, "lag")));
  return { p99: Math.max(0, ...r.map((x) => x.p99)), max: Math.max(0, ...r.map((x) => x.max)) };
}

/** The gateway's read of a cluster agent, over an agent's view sent by its host. */
function clusterView(v: AgentView): ClusterView {
  return {
    peerKey: v.peerKey,
    synced: v.synced,
    isMaster: v.isMaster,
    sessionId: v.sessionId,
    nodeId: v.nodeId,
    snapshot: () => v.snapshot,
    livePeers: () => v.livePeers,
    command: () => Promise.reject(new Error("a view sent by a bench host takes no commands")),
    on: () => () => false,
  };
}

async function profile(h: AgentHost, name: string): Promise<void> {
  mkdirSync(PROFILE_DIR!, { recursive: true });
  await h.ask({ t: "profile-stop", file: join(PROFILE_DIR!, `${name}.cpuprofile`) }, "profiled");
}

function procCpu(pid: number): number {
  return cpuMs({ pid }).ms;
}

// ---- report ----

async function main(): Promise<void> {
  const secret = randomUUID() + randomUUID();
  const results: Result[] = [];
  for (const n of SIZES) results.push(await runSize(n, secret));
  const body = report(results);
  console.log(body);
  await writeSection("Control plane at scale", body);
}

await main();
