// Requests through maintenance and crashes (issue 30): 3 hosts (network namespaces, TLS on), a
// model with two replicas, and clients behind a health-checking load balancer (testkit's: it sends
// to nodes whose GET /health answers 200 and tries another node only when a connection is refused),
// streaming and non-streaming requests in turn. Phases, on one cluster:
//   1. baseline: steady load, latencies of every request;
//   2. rolling restart: every node in turn (the master first) gets SIGTERM, is started again and
//      the run waits for it to rejoin and for two ready replicas before the next;
//   3. kill -9 of a replica's engine (llama-server; its node restarts it) under load, stream
//      migration off, then on (request header x-ic-migrate: 1);
//   4. kill -9 of a replica's whole node (its process group: node, nats-server, engines), migration
//      off, then on; the node is started again after each.
// It reports requests served, failed (by kind and error) and migrated per phase, and the p99
// latency of the requests that started during each restart against the baseline's p99 from the
// same run. Reports only; nothing is asserted. BENCH_CLIENTS, BENCH_BASE_S and BENCH_MAX_TOKENS
// change the load.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  enginePidOf,
  HealthCheckedBalancer,
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
  waitForReadyInstances,
} from "@ic/testkit";
import type { HostCluster, NodeProcess } from "@ic/testkit";
import { machineLine, quantile, writeSection } from "../lib/report.ts";

const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 4);
const BASE_S = Number(process.env.BENCH_BASE_S ?? 20);
const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 60);

interface StateDoc {
  session: { session_id: string } | null;
  node_identities: { name: string; is_master: boolean; node_id: string }[];
  instances: {
    instance_id: string;
    assignments: { node_id: string; rank: number }[];
    runners: { rank: number; state: string; endpoint?: string }[];
  }[];
}

/** One request as the client saw it. */
interface Outcome {
  readonly stream: boolean;
  readonly start: number;
  readonly end: number;
  readonly ok: boolean;
  /** "200", or the status and error code, or how the stream ended. */
  readonly result: string;
  /** A stream that moved to another replica (its final chunk says x_ic.migrated_from). */
  readonly migrated: boolean;
  /** The longest gap between two chunks of a stream (ms): a migration's pause shows here. */
  readonly maxGapMs: number;
  /** The node whose gateway the balancer sent it to. */
  readonly via: string;
  /** It asked for stream migration (x-ic-migrate: 1). */
  readonly optedIn: boolean;
  /** What the client got, for a failure (the start of the body or the error). */
  readonly detail: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function one(
  lb: HealthCheckedBalancer,
  model: string,
  stream: boolean,
  migrate: boolean,
): Promise<Outcome> {
  const start = Date.now();
  let via = "";
  let detail = "";
  const done = (ok: boolean, result: string, migrated = false, maxGapMs = 0): Outcome => ({
    via,
    optedIn: migrate && stream,
    detail: ok ? "" : detail.slice(-400),
    stream,
    start,
    end: Date.now(),
    ok,
    result,
    migrated,
    maxGapMs,
  });
  try {
    const r = await lb.post(
      "/v1/chat/completions",
      {
        model,
        stream,
        max_tokens: MAX_TOKENS,
        messages: [{ role: "user", content: "Tell me a story about the sea." }],
      },
      migrate ? { "x-ic-migrate": "1" } : {},
      (n) => (via = n.spec.name),
    );
    if (!stream || r.status !== 200 || !r.body) {
      const text = await r.text();
      detail = text;
      const body = (JSON.parse(text || "{}") as { error?: { code?: string } } | null) ?? {};
      return done(r.status === 200, r.status === 200 ? "200" : `${r.status} ${body.error?.code}`);
    }
    let text = "";
    let last = Date.now();
    let maxGapMs = 0;
    const decoder = new TextDecoder();
    for await (const chunk of r.body) {
      const now = Date.now();
      if (text.length > 0) maxGapMs = Math.max(maxGapMs, now - last);
      last = now;
      text += decoder.decode(chunk as Uint8Array, { stream: true });
      detail = text;
    }
    const code = /"error":\{[^}]*"code":"([a-z_]+)"/.exec(text)?.[1];
    const migrated = text.includes('"migrated_from"');
    if (code) return done(false, `stream error ${code}`, migrated, maxGapMs);
    if (!text.includes("[DONE]")) return done(false, "stream cut", migrated, maxGapMs);
    return done(true, "200", migrated, maxGapMs);
  } catch (e) {
    detail += ` ${String(e)} ${String((e as { cause?: unknown }).cause)}`;
    return done(false, `client error ${(e as { cause?: { code?: string } }).cause?.code ?? e}`);
  }
}

/** Clients sending request after request (streaming and not, in turn) until stopped. */
function load(lb: HealthCheckedBalancer, model: string, migrate: () => boolean) {
  const outcomes: Outcome[] = [];
  let stopped = false;
  const clients = Array.from({ length: CLIENTS }, async (_, k) => {
    for (let i = k; !stopped; i++) outcomes.push(await one(lb, model, i % 2 === 0, migrate()));
  });
  return {
    outcomes,
    async stop() {
      stopped = true;
      await Promise.all(clients);
    },
  };
}

/** A node that exited although nobody stopped it is reported (with its last log lines) and started. */
async function restartCrashed(nodes: readonly NodeProcess[], say: (l: string) => void) {
  for (const n of nodes) {
    if (n.running) continue;
    say(`node ${n.spec.name} had exited by itself (code ${await n.waitExit()}); started again`);
    console.log(n.logLines.slice(-40).join("\n"));
    await n.start();
  }
}

const ms = (v: number) => (Number.isFinite(v) ? `${Math.round(v)} ms` : "n/a");
const p99 = (os: readonly Outcome[]) =>
  quantile(
    os.map((o) => o.end - o.start).sort((a, b) => a - b),
    0.99,
  );
const p50 = (os: readonly Outcome[]) =>
  quantile(
    os.map((o) => o.end - o.start).sort((a, b) => a - b),
    0.5,
  );

/** Requests that started in [from, to). */
const within = (os: readonly Outcome[], from: number, to: number) =>
  os.filter((o) => o.start >= from && o.start < to);

function tally(os: readonly Outcome[]): string {
  const failed = os.filter((o) => !o.ok);
  const why = new Map<string, number>();
  for (const o of failed) {
    const k = `${o.stream ? "stream" : "plain"}: ${o.result}`;
    why.set(k, (why.get(k) ?? 0) + 1);
  }
  return (
    `${os.length} served (${os.filter((o) => o.stream).length} streaming), ${failed.length} failed` +
    (failed.length ? ` (${[...why].map(([k, n]) => `${n}× ${k}`).join("; ")})` : "") +
    `, ${os.filter((o) => o.migrated).length} migrated`
  );
}

/** What the phases share: the log, the reports read once the load has stopped, the kills' times. */
interface Phases {
  say: (l: string) => void;
  /** What each phase measures, read once the load has stopped (every request then has its end). */
  reports: ((all: readonly Outcome[]) => string)[];
  /** When each kill happened: a phase counts what started after its kill and ended before the next. */
  kills: number[];
}

type Base = (all: readonly Outcome[]) => Outcome[];

/** Waits for the cluster and the model, places two replicas; the first state with both ready. */
async function placeReplicas(nodes: readonly NodeProcess[], modelId: string): Promise<StateDoc> {
  await waitForConvergence(nodes, 3);
  await waitFor(
    async () =>
      (await nodes[0]!.get<{ models: { model_id: string }[] }>("/state")).models.length > 0
        ? true
        : undefined,
    { timeoutMs: 30_000, what: "the model registered" },
  );
  const placed = await nodes[0]!.post("/place_instance", { model_id: modelId, replicas: 2 });
  if (placed.status !== 200) throw new Error(`place_instance ${placed.status}`);
  return waitForReadyInstances<StateDoc>(nodes, 2, 120_000);
}

/** 1. Baseline: BASE_S seconds of steady load; what started in it. */
async function baseline(p: Phases): Promise<Base> {
  await sleep(2000);
  const baseFrom = Date.now();
  await sleep(BASE_S * 1000);
  const baseTo = Date.now();
  const base = (all: readonly Outcome[]) => within(all, baseFrom, baseTo);
  p.reports.push(
    (all) =>
      `baseline (${BASE_S} s): ${tally(base(all))}; latency p50 ${ms(p50(base(all)))}, p99 ${ms(p99(base(all)))}`,
  );
  return base;
}

/** The replicas as first placed: the first state with both ready, and its session. */
interface Placed {
  first: StateDoc;
  session: string;
}

/** 2. Rolling SIGTERM restart, the master first. */
async function rollingRestart(
  nodes: readonly NodeProcess[],
  { first, session }: Placed,
  p: Phases,
  base: Base,
): Promise<void> {
  const masterName = first.node_identities.find((n) => n.is_master)!.name;
  const order = [...nodes].sort(
    (a, b) => Number(b.spec.name === masterName) - Number(a.spec.name === masterName),
  );
  const rollFrom = Date.now();
  for (const n of order) {
    const view = await nodes.find((x) => x !== n)!.get<StateDoc>("/state");
    const wasMaster = view.node_identities.find((x) => x.name === n.spec.name)!.is_master;
    const t0 = Date.now();
    await n.stop(40_000);
    const stopMs = Date.now() - t0;
    await n.start();
    await restartCrashed(nodes, p.say);
    await waitForConvergence(nodes, 3, 60_000);
    await waitForReadyInstances<StateDoc>(nodes, 2, 120_000);
    const t1 = Date.now();
    p.reports.push((all) => {
      const w = within(all, t0, t1);
      return (
        `restart ${n.spec.name}${wasMaster ? " (master)" : ""}: drained and stopped in ${ms(stopMs)}, ` +
        `back with two replicas in ${ms(t1 - t0)}; ${tally(w)}; p99 ${ms(p99(w))} ` +
        `(${ms(p99(w) - p99(base(all)))} over the baseline's p99)`
      );
    });
    await sleep(2000);
  }
  const rollTo = Date.now();
  const after = await nodes[0]!.get<StateDoc>("/state");
  const same = after.session?.session_id === session;
  // What ended before the first kill (a request still running then is counted with the kill).
  p.reports.push(
    (all) =>
      `rolling restart, all: ${tally(within(all, rollFrom, rollTo).filter((o) => o.end < (p.kills[0] ?? Infinity)))}; session ${same ? "unchanged" : "CHANGED"}`,
  );
}

/**
 * The victim of a kill: a node holding a replica's rank 0, never the master (a lost master changes
 * the session: the spec's failure, measured by bench/failover); the store host only when the other
 * holder is the master. Also that replica's engine endpoint.
 */
async function pickVictim(
  nodes: readonly NodeProcess[],
): Promise<{ name: string; endpoint: string | undefined }> {
  const s = await waitForReadyInstances<StateDoc>(nodes, 2, 120_000);
  const rank0 = s.instances.map((i) => ({
    node: s.node_identities.find(
      (n) => n.node_id === i.assignments.find((a) => a.rank === 0)!.node_id,
    )!,
    endpoint: i.runners.find((r) => r.rank === 0)?.endpoint,
  }));
  const pick =
    rank0.find((r) => r.node.name !== nodes[0]!.spec.name && !r.node.is_master) ??
    rank0.find((r) => !r.node.is_master)!;
  return { name: pick.node.name, endpoint: pick.endpoint };
}

/** When a kill happened (t0), the end of what it is measured over (t1), and every kill's time. */
interface KillTimes {
  t0: number;
  t1: number;
  kills: readonly number[];
}

/** What a kill at t0 did to the requests in flight then and to those started until t1. */
function killReport(
  what: string,
  target: "engine" | "node",
  victim: NodeProcess,
  { t0, t1, kills }: KillTimes,
): (all: readonly Outcome[]) => string {
  return (all) => {
    const hit = all.filter((o) => o.start < t0 && o.end >= t0);
    const next = kills.find((k) => k > t0) ?? Infinity;
    const w = within(all, t0, t1).filter((o) => o.end < next);
    // A killed node's own gateway dies with it: what the client sent there is lost on the
    // client's connection, which nothing behind it can mend (counted apart).
    const own = (o: Outcome) => target === "node" && o.via === victim.spec.name;
    const moved = [...hit, ...w].filter((o) => o.migrated);
    const others = hit.filter((o) => !own(o));
    const gaps = moved.map((o) => o.maxGapMs).sort((a, b) => a - b);
    return (
      `${what}: in flight at the kill through the other gateways: streams that asked for ` +
      `migration: ${tally(others.filter((o) => o.optedIn))}; the others: ${tally(others.filter((o) => !o.optedIn))}` +
      (target === "node" ? `; through its own gateway: ${tally(hit.filter(own))}` : "") +
      `; started in the next 8 s: ${tally(w.filter((o) => !own(o)))}` +
      (target === "node"
        ? ` (sent to the dead node before the balancer noticed: ${tally(w.filter(own))})`
        : "") +
      (moved.length
        ? `; migrated streams paused at most ${ms(gaps.at(-1)!)} (median ${ms(quantile(gaps, 0.5))})`
        : "")
    );
  };
}

/**
 * 3 to 6. kill -9 of a replica's engine (llama-server; its node restarts it), then of a replica's
 * whole node (node, nats-server, engines), each with stream migration off and on. The victim holds
 * a replica and is not the master.
 */
async function killPhase(
  cluster: HostCluster,
  target: "engine" | "node",
  migrating: boolean,
  p: Phases,
): Promise<void> {
  const nodes = cluster.nodes;
  await sleep(3000);
  const pick = await pickVictim(nodes);
  const victim = nodes.find((n) => n.spec.name === pick.name)!;
  const t0 = Date.now();
  p.kills.push(t0);
  if (target === "engine") {
    const url = new URL(pick.endpoint!);
    process.kill(enginePidOf(url.port, cluster.lab.host(victim.spec.name).address), "SIGKILL");
  } else {
    victim.kill("SIGKILL");
    await victim.waitExit();
  }
  // Requests that started before the kill and ended after it were in flight at the kill.
  await sleep(8000);
  const t1 = Date.now();
  const what = `kill -9 of ${pick.name}'s ${target === "engine" ? "engine" : "whole node"}, new requests ${migrating ? "asking for" : "without"} migration`;
  p.reports.push(killReport(what, target, victim, { t0, t1, kills: p.kills }));
  if (target === "node") await victim.start();
  await restartCrashed(nodes, p.say);
  await waitForConvergence(nodes, 3, 60_000);
}

/** Every failure, with what the client got and what the nodes logged meanwhile (for the analysis). */
function printFailures(outcomes: readonly Outcome[], nodes: readonly NodeProcess[]): void {
  for (const o of outcomes.filter((x) => !x.ok)) {
    console.log(
      `failed via ${o.via} at ${new Date(o.start).toISOString()}: ${o.result}: ${o.detail}`,
    );
    for (const n of nodes)
      for (const l of n.logLines) {
        const t = Date.parse(/"time":"([^"]+)"/.exec(l)?.[1] ?? "");
        if (
          t >= o.start - 500 &&
          t <= o.end + 500 &&
          /"level":(40|50|60)|drain|stopp|lost|broke/.test(l)
        )
          console.log(`  ${n.spec.name}: ${l.slice(0, 400)}`);
      }
  }
}

/** Every phase under one load, on one cluster; the phases' reports said once the load stopped. */
async function runPhases(cluster: HostCluster, modelId: string, say: (l: string) => void) {
  const p: Phases = { say, reports: [], kills: [] };
  const nodes = cluster.nodes;
  const first = await placeReplicas(nodes, modelId);
  const session = first.session!.session_id;
  const lb = new HealthCheckedBalancer(nodes);
  let migrate = false;
  const run = load(lb, modelId, () => migrate);
  const base = await baseline(p);
  await rollingRestart(nodes, { first, session }, p, base);
  for (const target of ["engine", "node"] as const) {
    for (const migrating of [false, true]) {
      migrate = migrating;
      await killPhase(cluster, target, migrating, p);
    }
  }
  await run.stop();
  await lb.stop();
  for (const r of p.reports) say(r(run.outcomes));
  printFailures(run.outcomes, nodes);
  say(
    `whole run: ${tally(run.outcomes)}; ${lb.refused} connection(s) refused and sent to another node`,
  );
}

/** The section of docs/benchmarks.md (or BENCH_REPORT): how it was run, then every phase's line. */
async function writeReport(lines: readonly string[]): Promise<void> {
  await writeSection(
    "Maintenance and crashes: requests through restarts (bench/maintenance)",
    [
      "`npm run bench maintenance`: 3 hosts (network namespaces, TLS), a ~30 MB model with " +
        `two replicas, ${CLIENTS} clients behind a health-checking load balancer (testkit's ` +
        "`HealthCheckedBalancer`: GET /health every 100 ms; a refused connection goes to another " +
        `node), streaming and non-streaming in turn, ${MAX_TOKENS} tokens each. The latency ` +
        "figures of each restart are the requests that started between its SIGTERM and two ready " +
        "replicas again, against the baseline's p99 from the same run. A kill's victim holds a " +
        "replica and is never the master (a lost master changes the session: the spec's failure, " +
        "measured by bench/failover). How to read the failures: a stream that did not ask for " +
        "migration and was on the killed engine ends with the spec's `instance_lost` event, as it " +
        "should; a request whose client connection went to the killed node's own gateway fails with " +
        "a socket error, which nothing behind that connection can mend (a load balancer does not " +
        "resend a POST it has sent); non-streaming requests on the killed engine are retried before " +
        "their first byte. The target is 0 failures in the rolling restart, and 0 for non-streaming " +
        "requests and streams that asked for migration through the surviving gateways.",
      "",
      machineLine(),
      "",
      ...lines.map((l) => `- ${l}`),
    ].join("\n"),
  );
}

async function main(): Promise<void> {
  const store = await mkdtemp(join(tmpdir(), "ic-bench-maint-"));
  const { modelId } = await seedStore(store, { modelId: "bench/maintenance", slow: true });
  let cluster: HostCluster | undefined;
  const lines: string[] = [];
  const say = (l: string) => {
    console.log(l);
    lines.push(l);
  };
  try {
    cluster = await startHostCluster(3, {
      config: (i) => ({
        node: { drain_timeout_ms: 30_000 },
        engine: { context_size: 4096, extra_args: ["-np", "4"] },
        ...(i === 0 ? { store_path: store } : {}),
      }),
    });
    await runPhases(cluster, modelId, say);
  } finally {
    await cluster?.[Symbol.asyncDispose]();
    await rm(store, { recursive: true, force: true });
  }
  await writeReport(lines);
}

await main();
