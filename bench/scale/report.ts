// bench/scale's report: the "## Control plane at scale" section's text from every size's result.
import { machineLine, summarize } from "../lib/report.ts";
import {
  FAST_KILLS,
  INSTANCES_PER_NODE,
  KILLS,
  PER_HOST,
  SERVERS,
  SETTLE_S,
  TIMINGS,
  WINDOW_S,
} from "./settings.ts";
import type { KillSample, Result } from "./settings.ts";

const f0 = (x: number) => x.toFixed(0);
const f1 = (x: number) => x.toFixed(1);
const f2 = (x: number) => x.toFixed(2);

function medianRange(xs: readonly number[], f = f0): string {
  if (xs.length === 0) return "–";
  const s = [...xs].sort((a, b) => a - b);
  const m = summarize(s).median;
  return s.length === 1 ? f(m) : `${f(m)} (${f(s[0]!)}–${f(s[s.length - 1]!)})`;
}

const timed = (r: Result) => r.kills.filter((k) => !k.fast);
const fast = (r: Result) => r.kills.filter((k) => k.fast);

/** The three tables' rows: timings, bus traffic and CPU, sizes; one row per size. */
function tableRows(results: readonly Result[]): {
  rows1: string[];
  rows2: string[];
  rows3: string[];
} {
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
  return { rows1, rows2, rows3 };
}

export function report(results: readonly Result[]): string {
  const b = results[0]!;
  const target = TIMINGS.electionTimeoutMs + 1000;
  const top = results[results.length - 1]!;
  const killWorst = Math.max(...results.flatMap((r) => timed(r).map((k) => k.converged)));
  const masterMet = top.masterPct < 10;
  const killMet = killWorst <= target;
  const { rows1, rows2, rows3 } = tableRows(results);
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
