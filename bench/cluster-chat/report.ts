// The "Cluster chat capacity" section of docs/benchmarks.md from the runs of bench/cluster-chat.
import type { Figures } from "./measure.ts";

export interface SizeRun {
  readonly n: number;
  /** Cores the machine kept busy with the cluster idle (heartbeats, telemetry, probes). */
  readonly idleCores: number;
  readonly rows: Figures[];
  readonly profile: string | undefined;
}

/** Issue 32's bounds: p99 added over the engines alone, and the rate asked for through 3 gateways. */
export const ADDED_P99_LIMIT_MS = 20;
export const TARGET_RATE = 1000;
export const MASTER_LIMIT = 0.5;

const f0 = (x: number) => x.toFixed(0);
const f1 = (x: number) => x.toFixed(1);
const f2 = (x: number) => x.toFixed(2);
const pct = (x: number) => `${(x * 100).toFixed(0)}%`;

/** The highest rate that kept p99 added under the limit with nothing failed. */
export function sustained(rows: readonly Figures[]): Figures | undefined {
  return rows
    .filter((r) => r.addedP99 < ADDED_P99_LIMIT_MS && r.failed === 0)
    .sort((a, b) => b.rate - a.rate)[0];
}

function table(rows: readonly Figures[]): string {
  const head =
    "| requests at once | direct req/s | gateway req/s | p50 ms | p99 ms | p99 added ms | failed | master node, core | other node (mean), core | master's own, core | node CPU ms/req | nats-server CPU ms/req | engine CPU ms/req | client CPU ms/req | req/s per core (nodes + nats) | machine busy, cores |";
  const sep = `|${"---|".repeat(16)}`;
  const body = rows.map(
    (r) =>
      `| ${r.total} | ${f0(r.directRate)} | ${f0(r.rate)} | ${f1(r.p50)} | ${f1(r.p99)} | ${f1(r.addedP99)} | ${r.failed} | ${pct(r.masterCore)} | ${pct(r.followerCore)} | ${pct(r.masterOwnCore)} | ${f2(r.nodeCpuPerReq)} | ${f2(r.busCpuPerReq)} | ${f2(r.engineCpuPerReq)} | ${f2(r.clientCpuPerReq)} | ${f0(r.perCore)} | ${f2(r.machineCores)} |`,
  );
  return [head, sep, ...body].join("\n");
}

function trafficTable(rows: readonly Figures[]): string {
  return [
    "| requests at once | events sequenced per request | bus messages per request (all nodes, in + out) | bus bytes per request | event-log records per request per node | event-log bytes per request per node |",
    "|---|---|---|---|---|---|",
    ...rows.map(
      (r) =>
        `| ${r.total} | ${f2(r.events)} | ${f2(r.busMsgs)} | ${f0(r.busBytes)} | ${f2(r.logRecords)} | ${f1(r.logBytes)} |`,
    ),
  ].join("\n");
}

function verdict(run: SizeRun): string {
  const best = sustained(run.rows);
  if (!best)
    return `${run.n} gateways: no step kept p99 added under ${ADDED_P99_LIMIT_MS} ms with nothing failed.`;
  const line = `${run.n} gateways: highest sustained **${f0(best.rate)} requests/s** (p99 ${f1(best.p99)} ms, ${f1(best.addedP99)} ms over the engines alone) with the master's node at ${pct(best.masterCore)} of a core (${pct(best.masterOwnCore)} above a gateway that is not the master); our path alone (nodes and their nats-servers) would carry ${f0(best.perCore)} requests/s per core.`;
  if (run.n !== 3) return line;
  const met = best.rate >= TARGET_RATE && best.masterCore < MASTER_LIMIT;
  return `${line} Target (≥ ${TARGET_RATE} requests/s through 3 gateways, master under ${pct(MASTER_LIMIT)} of a core): **${met ? "met" : "missed"}**.`;
}

/** The BENCH_* settings this run was given, as a command line's prefix. */
function settings(): string {
  return Object.entries(process.env)
    .filter(([k]) => k.startsWith("BENCH_") && k !== "BENCH_REPORT")
    .map(([k, v]) => `${k}=${/^[\w.,/-]*$/.test(v ?? "") ? v : JSON.stringify(v)} `)
    .sort()
    .join("");
}

export function reportOf(runs: readonly SizeRun[], context: string): string {
  const out = [
    `Command: \`${settings()}npm run bench cluster-chat\`. Nodes on lab hosts (network namespaces on one bridge, TLS and bearer tokens as deployed), each running bench/lib/stand-in-engine.mjs as its llama-server (the node supervises it, routes to it and relays its answers as it would llama-server's; it answers at once), the tiny model placed once per node. Closed-loop HTTPS clients in this process, the same number of requests at once on every gateway; before each step the same load straight to the engines (the baseline of "p99 added"). CPU from /proc per process over the gateway window, the idle cluster's rate subtracted. ${context}`,
    "",
  ];
  for (const run of runs) {
    out.push(
      `### ${run.n} nodes`,
      "",
      `The idle cluster kept ${f2(run.idleCores)} of the machine's cores busy (heartbeats, telemetry, link probes; subtracted from the CPU per request below, not from "machine busy").`,
      "",
      table(run.rows),
      "",
      trafficTable(run.rows),
      "",
      verdict(run),
      "",
    );
    if (run.profile)
      out.push(
        "Profile (the master first, then one other gateway, whole run):",
        "",
        "```",
        run.profile,
        "```",
        "",
      );
  }
  return out.join("\n");
}
