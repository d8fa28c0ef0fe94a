// The soak, long: 3 nodes on lab hosts (network namespaces) with tokens and a cluster secret, the
// tiny model placed twice, 4 clients sending small chat requests without pause through every node
// that is up (the highest rate the tiny model sustains here), for about 11 minutes: a quiet stretch
// of 4 minutes (memory over time), two rolling SIGTERM restarts of every node (the master first),
// a full SIGTERM restart and a full kill -9 restart. Reports requests served and failed (by code and
// phase), node crashes, the largest bus message, events replicated per request, each node's memory
// over time, and how long every deployment took to serve again. Usage: npm run bench soak
// (BENCH_SOAK_SCALE=0.25 shortens every load phase, for a smoke run).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  placeAndWait,
  seedStore,
  soak,
  startHostCluster,
  tally,
  unexplainedFailures,
  waitForConvergence,
} from "@ic/testkit";
import type { NodeProcess, SoakPhase } from "@ic/testkit";
import { machineLine, writeSection } from "../lib/report.ts";

const MODEL = "test/tiny-llama";
const SCALE = Number(process.env.BENCH_SOAK_SCALE ?? 1);
const load = (seconds: number): SoakPhase => ({
  kind: "load",
  seconds: Math.round(seconds * SCALE),
});
const QUIET_S = 240;
const PHASES: SoakPhase[] = [
  load(QUIET_S),
  { kind: "rolling" },
  load(60),
  { kind: "rolling" },
  load(60),
  { kind: "full", signal: "SIGTERM" },
  load(60),
  { kind: "full", signal: "SIGKILL" },
  load(120),
];

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "bench-soak-"));
  const { store } = await seedStore(join(dir, "store"), { modelId: MODEL });
  await using cluster = await startHostCluster(3, {
    config: (i) => (i === 0 ? { store_path: store } : {}),
  });
  await waitForConvergence(cluster.nodes, 3, 60_000);
  await placeAndWait(cluster.nodes[0]!, { model_id: MODEL, min_nodes: 1 });
  await placeAndWait(cluster.nodes[1]!, { model_id: MODEL, min_nodes: 1 });
  // The runner's warm-up on this machine (the restart target is warm-up + 10 s).
  const warmupMs = await measureWarmup(cluster.nodes[2]!);
  const r = await soak(cluster, {
    model: MODEL,
    clients: 4,
    sampleMs: 10_000,
    phases: PHASES,
    note: (l) => console.log(`[soak] ${l}`),
  });
  const t = tally(r);
  const served = t.byCode.ok ?? 0;
  const failed = r.requests.length - served;
  const unexplained = unexplainedFailures(r);
  const quietEnd = QUIET_S * SCALE;
  const memoryRows = Object.entries(r.memory).map(([node, samples]) => {
    const quiet = samples.filter(([s]) => s >= 30 && s <= quietEnd);
    const first = quiet[0]?.[1];
    const last = quiet.at(-1)?.[1];
    const max = Math.max(...samples.map(([, m]) => m));
    const f = (x: number | undefined) => (x === undefined ? "–" : x.toFixed(0));
    return `| ${node} | ${f(first)} | ${f(last)} | ${first && last ? `${(((last - first) / first) * 100).toFixed(1)}%` : "–"} | ${f(max)} |`;
  });
  const phaseRows = Object.entries(t.byPhase).map(
    ([phase, codes]) =>
      `| ${phase} | ${codes.ok ?? 0} | ${Object.entries(codes)
        .filter(([c]) => c !== "ok")
        .map(([c, n]) => `${c} ${n}`)
        .join(", ")} |`,
  );
  const recoveryRows = r.recoveries.map(
    (x) =>
      `| ${x.phase} | ${(x.ms / 1000).toFixed(1)} | ${x.afterStartMs !== undefined ? (x.afterStartMs / 1000).toFixed(1) : "–"} |`,
  );
  const body = [
    `\`npm run bench soak\`: 3 hosts (network namespaces, tokens, cluster secret), the tiny model placed twice, 4 clients without pause through every node that is up, ${r.seconds.toFixed(0)} s in all. ${machineLine()}.`,
    "",
    `- Requests: ${r.requests.length} (${(r.requests.length / r.seconds).toFixed(1)}/s), served ${served}, failed ${failed}; failures that are neither a typed retryable error nor in flight through a node being stopped: **${unexplained.length}**.`,
    `- Node processes that ended on their own (crashes): **${r.crashes.length}**.`,
    `- Largest bus message sent by any node: ${Object.entries(r.largestBusMessage)
      .sort((a, b) => b[1] - a[1])
      .map(([n, b]) => `${n} ${b} B`)
      .join(", ")} (the sync page budget is 256 KiB, max_payload 1 MiB).`,
    `- Events sequenced by the masters over the run: ${r.eventsSequenced}, ${(r.eventsSequenced / r.requests.length).toFixed(4)} per request (membership and placement; chat adds none).`,
    `- Runner warm-up of the tiny model here: ${(warmupMs / 1000).toFixed(1)} s (the target for serving again after a full restart is warm-up + 10 s, counted from when every node runs again).`,
    "",
    "| phase | served | failed, by code |",
    "| --- | --- | --- |",
    ...phaseRows,
    "",
    "| restart | serving again after (s, from the first signal) | after every node ran again (s) |",
    "| --- | --- | --- |",
    ...recoveryRows,
    "",
    `Resident memory per node (MiB) during the quiet stretch (from 30 s to ${quietEnd.toFixed(0)} s: one process each), and the highest sample of the run:`,
    "",
    "| node | at 30 s | at the end of the quiet stretch | change | max over the run |",
    "| --- | --- | --- | --- | --- |",
    ...memoryRows,
  ].join("\n");
  console.log(body);
  await writeSection("Soak: steady traffic through rolling and full restarts", body);
  await rm(dir, { recursive: true, force: true });
}

/**
 * How long a runner of the model takes from its process start to ready: a probe instance placed on
 * `n` (the model already staged there), watched every 25 ms, then deleted.
 */
async function measureWarmup(n: NodeProcess): Promise<number> {
  type Doc = {
    node_identities: { node_id: string; name: string }[];
    instances: {
      instance_id: string;
      runners: { rank: number; state: string; since: number; warmup_started_at?: number }[];
    }[];
  };
  const doc = await n.get<Doc>("/state");
  const excluded = doc.node_identities.filter((x) => x.name !== n.spec.name).map((x) => x.node_id);
  const r = await n.post("/place_instance", {
    model_id: MODEL,
    min_nodes: 1,
    excluded_nodes: excluded,
  });
  const placed = (await r.json()) as { instance?: { instance_id: string } };
  const id = placed.instance?.instance_id;
  if (!id) return NaN;
  let started: number | undefined;
  let ready: number | undefined;
  for (let i = 0; i < 2400 && ready === undefined; i++) {
    const d = await n.get<Doc>("/state?links=0");
    const r0 = d.instances.find((x) => x.instance_id === id)?.runners.find((x) => x.rank === 0);
    if (r0?.warmup_started_at !== undefined) started = r0.warmup_started_at;
    if (r0?.state === "RunnerReady") ready = r0.since;
    await new Promise((res) => setTimeout(res, 25));
  }
  await fetch(`${n.apiUrl}/instance/${id}`, { method: "DELETE", headers: n.authHeaders });
  return started !== undefined && ready !== undefined ? ready - started : NaN;
}

await main();
