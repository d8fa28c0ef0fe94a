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
// the first successor's takeover (summarize them with profile-summary.ts); BENCH_DEBUG: how long each
// survivor took after the election; BENCH_LOG_LEVEL / BENCH_LOG_SAMPLE / BENCH_VERBOSE: the agents'
// log lines (counted per phase; sampled or shown); BENCH_REPORT: write the section elsewhere.
import { randomUUID } from "node:crypto";
import { mkdirSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { clusterCredentials, ConfigSchema } from "@ic/config";
import { stateDocument } from "@ic/gateway";
import type { ClusterView } from "@ic/protocol";
import type { AgentTimings } from "@ic/cluster";
import { cpuMs } from "../lib/streaming.ts";
import { machineLine, summarize, writeSection } from "../lib/report.ts";
import { BenchBus, rate } from "./bus.ts";
import type { Counters } from "./bus.ts";
import { AgentHost, StatusBoard } from "./hosts.ts";
import type { AgentSpec, AgentStatus, AgentView, Sizes } from "./wire.ts";

const SIZES = (process.env.BENCH_SIZES ?? "10,25,50,100").split(",").map(Number);
const SERVERS = Number(process.env.BENCH_SERVERS ?? 4);
/** Agents per shared host process (the non-senior ones). */
const PER_HOST = Number(process.env.BENCH_PER_HOST ?? 25);
/** Master kills found by the timeouts alone (heartbeats stop). */
const KILLS = Number(process.env.BENCH_KILLS ?? 3);
/**
 * Then master kills with the fast failure signal: every survivor is told at once that its
 * connection to the master dropped (what node.ts's watch connection does: ClusterAgent.connectionLost).
 */
const FAST_KILLS = Number(process.env.BENCH_FAST_KILLS ?? 2);
const SETTLE_S = Number(process.env.BENCH_SETTLE_S ?? 6);
const WINDOW_S = Number(process.env.BENCH_WINDOW_S ?? 20);
/** Two-node instances placed per node (the workload that gives heartbeats runners and the state instances). */
const INSTANCES_PER_NODE = Number(process.env.BENCH_INSTANCES_PER_NODE ?? 0.25);
const PROFILE_DIR = process.env.BENCH_PROFILE ? resolve(process.env.BENCH_PROFILE) : undefined;
const cluster = ConfigSchema.shape.cluster.parse({});
const TIMINGS: AgentTimings = {
  heartbeatMs: cluster.heartbeat_ms,
  livenessTimeoutMs: cluster.liveness_timeout_ms,
  electionTimeoutMs: cluster.election_timeout_ms,
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface KillSample {
  readonly fast: boolean;
  /** SIGKILL -> every survivor synced in one new session without the victim (ms). */
  converged: number;
  /** SIGKILL -> the successor reports itself master of the new session (ms). */
  elected: number;
  /** How long the successor had not heard the victim at the kill (ms). */
  silentAtKill: number | null;
  /** The successor's CPU from the kill to convergence (ms). */
  successorCpu: number;
  /** The longest a heartbeat took from its sender to an agent between the kill and convergence (ms). */
  lagMax: number;
}

interface Result {
  n: number;
  layout: string;
  join: number;
  elected: number;
  masterJoinCpu: number;
  placed: number;
  refused: string[];
  runners: number;
  bus: Counters;
  masterPct: number;
  perNodePct: number;
  natsPct: number;
  seniorFollowerPct: number;
  sizesFollower: Sizes;
  /** The follower's GET /state document and its topology.links part (bytes). */
  stateDoc: number;
  stateDocLinks: number;
  kills: KillSample[];
  /**
   * Heartbeat send -> handled by an agent, steady state: in the processes of one agent (the
   * master's successors) and in the shared ones (p99 of the worst process, max; ms).
   */
  lagAlone: Lag;
  lagShared: Lag;
  /** Slow-consumer events the nats-servers counted over the whole size. */
  slowConsumers: number;
  /** The machine's 1-minute load average at the start and the end of this size. */
  load: [number, number];
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
  const board = new StatusBoard();
  const hosts = groups.map(
    (g, i) => new AgentHost(i < seniors ? `senior-${i}` : `host-${i - seniors}`, g, board.update),
  );
  const layout = `${seniors} × 1 (master + successors) + ${hostsForRest} × ${Math.ceil(rest.length / hostsForRest)}, ${servers} nats-servers`;
  try {
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
    const master = hosts[0]!;
    const all = specs.map((s) => s.index);

    // ---- join: every agent starts; the master candidate first ----
    const cpu0 = master.cpu();
    if (PROFILE_DIR) master.send({ t: "profile-start" });
    const t0 = Date.now();
    for (const h of hosts) h.send({ t: "start" });
    const joined = await board.until(
      all,
      (s) => s.synced && s.members === n,
      (ss) => new Set(ss.map((s) => s.session)).size === 1,
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

    // ---- workload: instances placed through the master, runners reported by their nodes ----
    const instances = Math.floor(n * INSTANCES_PER_NODE);
    const work = await master.ask({ t: "workload", instances }, "workload", 120_000);
    const reported = await Promise.all(
      hosts.map((h) => h.ask({ t: "report-runners", index: work.index }, "runners")),
    );
    const runners = reported.reduce((s, r) => s + r.reported, 0);
    console.log(`n=${n}: placed ${work.placed} instances, ${runners} runners reported`);
    await sleep(SETTLE_S * 1000);

    // ---- steady state ----
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

    // ---- kills: the master's process, then its successor's, ... ----
    const kills: KillSample[] = [];
    const gone: string[] = [];
    const oldSessions = new Set([session0]);
    let alive = [...all];
    for (let k = 0; k < seniors - 1; k++) {
      const victim = hosts[k]!;
      const successor = hosts[k + 1]!;
      const v = victim.agents[0]!;
      if (!board.latest.get(v.index)?.master) throw new Error(`${victim.label} is not the master`);
      gone.push(v.peerKey);
      alive = alive.filter((i) => i !== v.index);
      await Promise.all(
        hosts.slice(k + 1).map((h) => h.ask({ t: "watch", gone: [...gone] }, "watching")),
      );
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
        (s) => s.synced && s.clean && s.members === alive.length && !oldSessions.has(s.session!),
        (ss) => new Set(ss.map((s) => s.session)).size === 1,
        30_000,
        `survivors in one new session after killing ${victim.label}`,
      );
      const successorCpu = successor.cpu() - c0;
      const killLag = await lagOf(hosts);
      if (profiling) await profile(successor, `n${n}-successor-takeover`);
      const session = done.statuses[0]!.session!;
      oldSessions.add(session);
      kills.push({
        lagMax: killLag.max,
        fast,
        converged: done.at - tk,
        elected: board.masterSince.get(session)! - tk,
        silentAtKill: heard.at === null ? null : tk - heard.at,
        successorCpu,
      });
      const killLogs = await logCounts(hosts);
      if (process.env.BENCH_DEBUG) {
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
      console.log(`n=${n}: kill ${k + 1}: converged in ${done.at - tk} ms`, killLogs);
      await sleep(2000);
    }
    return {
      n,
      layout,
      join,
      elected,
      masterJoinCpu,
      placed: work.placed,
      refused: work.refused,
      runners,
      bus: busRate,
      masterPct,
      perNodePct,
      natsPct,
      seniorFollowerPct,
      sizesFollower: sf.sizes,
      stateDoc,
      stateDocLinks,
      kills,
      lagAlone,
      lagShared,
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

interface Lag {
  readonly p99: number;
  readonly max: number;
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

const f0 = (x: number) => x.toFixed(0);
const f1 = (x: number) => x.toFixed(1);
const f2 = (x: number) => x.toFixed(2);

function medianRange(xs: readonly number[], f = f0): string {
  if (xs.length === 0) return "–";
  const s = [...xs].sort((a, b) => a - b);
  const m = summarize(s).median;
  return s.length === 1 ? f(m) : `${f(m)} (${f(s[0]!)}–${f(s[s.length - 1]!)})`;
}

function report(results: readonly Result[]): string {
  const b = results[0]!;
  const target = TIMINGS.electionTimeoutMs + 1000;
  const top = results[results.length - 1]!;
  const timed = (r: Result) => r.kills.filter((k) => !k.fast);
  const fast = (r: Result) => r.kills.filter((k) => k.fast);
  const killWorst = Math.max(...results.flatMap((r) => timed(r).map((k) => k.converged)));
  const masterMet = top.masterPct < 10;
  const killMet = killWorst <= target;
  const silent = (ks: KillSample[]) =>
    medianRange(ks.flatMap((k) => (k.silentAtKill === null ? [] : [k.silentAtKill])));
  const rows1 = results.map(
    (r) =>
      `| ${r.n} | ${r.layout} | ${r.join} | ${r.elected} | ${medianRange(timed(r).map((k) => k.converged))} | ${medianRange(timed(r).map((k) => k.elected))} | ${medianRange(timed(r).map((k) => k.converged - k.elected))} | ${silent(timed(r))} | ${medianRange(fast(r).map((k) => k.converged))} | ${r.load.map(f1).join(" → ")} |`,
  );
  const rows2 = results.map(
    (r) =>
      `| ${r.n} | ${f0(r.bus.published)} | ${f0(r.bus.delivered)} | ${f2(r.bus.deliveredBytes / 1e6)} | ${f0(r.bus.routed)} | ${f2(r.masterPct)} | ${f2(r.seniorFollowerPct)} | ${f2(r.perNodePct)} | ${f1(r.natsPct)} | ${f0(r.masterJoinCpu)} | ${medianRange(r.kills.map((k) => k.successorCpu))} | ${f0(r.lagAlone.p99)} / ${f0(r.lagAlone.max)} | ${f0(r.lagShared.p99)} / ${f0(r.lagShared.max)} | ${f0(Math.max(...r.kills.map((k) => k.lagMax)))} | ${r.slowConsumers} |`,
  );
  const rows3 = results.map(
    (r) =>
      `| ${r.n} | ${r.placed} / ${r.runners} | ${f1(r.sizesFollower.heartbeat / 1024)} | ${f1(r.sizesFollower.heartbeatLinks / 1024)} | ${f1(r.stateDoc / 1024)} | ${f1(r.stateDocLinks / 1024)} | ${f1(r.sizesFollower.replica / 1024)} | ${f1(r.sizesFollower.syncFromStart / 1024)} (${r.sizesFollower.events}) |`,
  );
  const ratio = (f: (r: Result) => number) =>
    results
      .slice(1)
      .map((r) => `${f2(f(r) / f(b))}× at ${r.n}`)
      .join(", ");
  const refused = new Map<string, number>();
  for (const c of results.flatMap((r) => r.refused)) refused.set(c, (refused.get(c) ?? 0) + 1);
  const refusedText = [...refused].map(([c, k]) => `${k}× ${c}`).join(", ");
  return `\`npm run bench scale\` — ${machineLine()}.

Sizes ${results.map((r) => r.n).join(", ")} in one run, each a fresh cluster on this machine: every
simulated node is a real \`ClusterAgent\` (services/cluster) on its own bus connection to one of
${Math.min(SERVERS, top.n)} real nats-servers (\`NatsServer\` of packages/bus, clustered by routes, every one seeded with
every other), with the defaults of packages/config (heartbeat ${TIMINGS.heartbeatMs} ms, election timeout
${TIMINGS.electionTimeoutMs} ms, liveness ${TIMINGS.livenessTimeoutMs} ms). A stand-in for the worker side
(bench/scale/stand-in.ts) feeds each heartbeat what node.ts does: telemetry (1–2 GPUs of 24–80 GB), a
measured link to every live peer (measured each period with noise and reported as the median of the
last 5, as LinkProber does; a heartbeat carries them only when they changed, link-report.ts), the node's
runners from its replica and the loop delay; like node.ts it also subscribes to the heartbeats for
its own echo. The master candidate (earliest \`started_at\`) and its ${KILLS + FAST_KILLS} successors each run
alone in their own process; the other nodes share processes of up to ${PER_HOST}. After all joined,
${INSTANCES_PER_NODE} two-node Pipeline instances per node are placed through the master (placement on the
master's view, then \`PlaceInstance\`, as the gateway does; 3 models of 4.9–42.5 GB) and every node
reports its runners ready (instances / runners in the last table${refusedText ? `; refused: ${refusedText}` : ""}).

Steady state: ${SETTLE_S} s after that, over ${WINDOW_S} s. CPU = user + system time from \`/proc/<pid>/stat\`
(10 ms ticks) in % of one core: the master's process alone; "a follower alone" = the next senior
node's process (one agent); per node = every other process's CPU / the nodes it hosts; the
nats-servers together. Bus traffic from the servers' monitoring (\`/varz\` less \`/routez\`):
published = messages clients sent, delivered = messages the servers handed to client connections,
routed = forwarded between servers. Then SIGKILL of the master's process at a random point of the
heartbeat cycle, ${KILLS} times in a row found by the timeouts alone (each successor in turn), then
${FAST_KILLS} more with the fast failure signal (every survivor's \`connectionLost\` called at the kill, as
its watch connection to the master does in node.ts), until every survivor is synced in one new
session of all survivors without the victim (statuses pushed by the agents' listeners, with their
own timestamps). Load = the machine's 1-minute load average at the start and the end of the size
(2 cores, shared with other work). Heartbeat sent → handled = from a heartbeat's \`sent_at\` to an
agent's handler (one clock), over every heartbeat an agent handled: how far behind the processes run.

Targets: master under 10% of a core at ${top.n} nodes — **${masterMet ? "met" : "not met"}** (${f2(top.masterPct)}%);
convergence after a master kill found by the timeouts within the election timeout + 1 s
(${target} ms) — **${killMet ? "met" : "not met"}** (worst ${killWorst} ms over every size).

| nodes | processes | join: start → all synced in one session of all (ms) | of which start → master elected (ms) | master kill (timeouts) → survivors in one new session, median (range) (ms) | kill → successor elected (ms) | elected → every survivor in its session (ms) | victim silent at the kill (ms) | master kill (connection-loss signal) → one new session (ms) | load |
|---|---|---|---|---|---|---|---|---|---|
${rows1.join("\n")}

| nodes | published (msg/s) | delivered (msg/s) | delivered (MB/s) | routed (msg/s) | master CPU (% core) | a follower alone (% core) | CPU per node (% core) | nats-servers (% core) | master CPU during join (ms) | successor CPU, kill → converged (ms) | heartbeat sent → handled, one-node processes, p99 / max (ms) | same, shared processes (ms) | same, max during the kills (ms) | slow consumers |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
${rows2.join("\n")}

| nodes | instances / runners | heartbeat with links (KiB) | of which links (KiB) | /state (KiB) | of which topology.links (KiB) | replica (KiB) | sync from index 1 (KiB, events) |
|---|---|---|---|---|---|---|---|
${rows3.join("\n")}

Against ${b.n} nodes, measured in the same run (nodes: ${ratio((r) => r.n)}; nodes²: ${ratio((r) => r.n * r.n)}):
delivered messages ${ratio((r) => r.bus.delivered)}; delivered bytes ${ratio((r) => r.bus.deliveredBytes)};
master CPU ${ratio((r) => r.masterPct)}; CPU per node ${ratio((r) => r.perNodePct)};
heartbeat size ${ratio((r) => r.sizesFollower.heartbeat)}; /state size ${ratio((r) => r.stateDoc)};
replica size ${ratio((r) => r.sizesFollower.replica)}.
`;
}

async function main(): Promise<void> {
  const secret = randomUUID() + randomUUID();
  const results: Result[] = [];
  for (const n of SIZES) results.push(await runSize(n, secret));
  const body = report(results);
  console.log(body);
  await writeSection("Control plane at scale", body);
}

await main();
