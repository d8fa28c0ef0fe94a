// A soak of a real cluster: steady chat load from a few clients while the driver restarts nodes in
// turn (SIGTERM, the master included) and all at once (SIGTERM or kill -9). It records every
// request's outcome with the phase it fell in, node processes that ended on their own (crashes),
// the largest bus message and each node's memory (sampled from /metrics), the events the masters
// sequenced, and how long the deployments took to serve again after each restart.
// Used by the chaos test (tests/chaos/soak.chaos.test.ts, short) and bench/soak (long).
import type { HostCluster, NodeProcess } from "./cluster.ts";
import { waitFor } from "./ports.ts";

export type SoakPhase =
  | { readonly kind: "load"; readonly seconds: number }
  /** Each node in turn (the master first): SIGTERM, start again, wait until all serve again. */
  | { readonly kind: "rolling" }
  /** Every node at once, then all started again. */
  | { readonly kind: "full"; readonly signal: "SIGTERM" | "SIGKILL" };

export interface SoakOptions {
  readonly model: string;
  /** Clients sending without pause, each through the next node that is up (as a load balancer would). */
  readonly clients: number;
  readonly phases: readonly SoakPhase[];
  /** Every this often, each node's /metrics is read (memory, largest bus message). */
  readonly sampleMs?: number;
  /** Where progress lines go (default: nowhere). */
  readonly note?: (line: string) => void;
  readonly maxTokens?: number;
}

export interface RequestOutcome {
  readonly via: string;
  readonly phase: string;
  readonly startedAt: number;
  readonly endedAt: number;
  readonly status: number;
  /** The error envelope's code; `connection` when the node's socket failed; `ok` when served. */
  readonly code: string;
  readonly retryable: boolean | undefined;
}

export interface SoakReport {
  readonly seconds: number;
  readonly requests: readonly RequestOutcome[];
  /** Node processes that ended without the driver stopping them. */
  readonly crashes: readonly { node: string; code: number | null; at: number }[];
  /** Largest message any node sent on the bus, by catalog name (bytes). */
  readonly largestBusMessage: Readonly<Record<string, number>>;
  /** Events the masters sequenced over the run (the sum of each session's last index). */
  readonly eventsSequenced: number;
  /** Resident memory per node: [seconds since start, MiB] while each process ran. */
  readonly memory: Readonly<Record<string, readonly (readonly [number, number])[]>>;
  /**
   * Milliseconds from each restart's first signal until every deployment served again through every
   * node; for a full restart also from the moment every node had started again.
   */
  readonly recoveries: readonly { phase: string; ms: number; afterStartMs?: number }[];
  /** When each node was being stopped (ms since the epoch), to tell in-flight losses apart. */
  readonly stopWindows: readonly { node: string; from: number; to: number }[];
}

interface StateDoc {
  session: { session_id: string } | null;
  index: number;
  deployments: { deployment_id: string; instance_id: string }[];
  instances: { instance_id: string; runners: { rank: number; state: string }[] }[];
}

/** Runs the phases against `cluster` (already serving `model`); resolves with what it saw. */
export async function soak(cluster: HostCluster, o: SoakOptions): Promise<SoakReport> {
  const run = new SoakRun(cluster, o);
  cluster.nodes.forEach((n) => run.watchExit(n));

  const deploymentIds = (await cluster.nodes[0]!.get<StateDoc>("/state")).deployments.map(
    (d) => d.deployment_id,
  );

  // Clients: each sends without pause through the next node that is up.
  const clients = Array.from({ length: o.clients }, () => run.client());

  // Sampling: memory and the largest bus message per node, and each session's index.
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      await run.sample();
      await sleep(o.sampleMs ?? 5000);
    }
  })();

  for (const [i, p] of o.phases.entries()) await run.runPhase(i, p, deploymentIds);
  run.running = false;
  await Promise.all(clients);
  sampling = false;
  await sampler;
  await run.sample();
  // From here the caller stops the nodes: those exits are not crashes.
  for (const n of cluster.nodes) run.expected.add(n.spec.name);
  return run.report();
}

/** What one soak run tracks while its clients, sampler and phases run side by side. */
class SoakRun {
  private readonly note: (line: string) => void;
  private readonly t0 = Date.now();
  /** Nodes the clients and the sampler may use (not being stopped). */
  private readonly up: Set<string>;
  /** Nodes the driver is stopping: their exits are not crashes. */
  readonly expected = new Set<string>();
  private readonly crashes: { node: string; code: number | null; at: number }[] = [];
  private readonly stopWindows: { node: string; from: number; to: number }[] = [];
  private readonly requests: RequestOutcome[] = [];
  private readonly largest: Record<string, number> = {};
  private readonly memory: Record<string, [number, number][]> = {};
  private readonly sessionIndex = new Map<string, number>();
  private readonly recoveries: { phase: string; ms: number; afterStartMs?: number }[] = [];
  private phase = "start";
  running = true;
  /** The clients' shared round robin over the nodes that are up. */
  private turn = 0;

  constructor(
    private readonly cluster: HostCluster,
    private readonly o: SoakOptions,
  ) {
    this.note = o.note ?? (() => {});
    this.up = new Set(cluster.nodes.map((n) => n.spec.name));
  }

  watchExit(n: NodeProcess): void {
    void n.waitExit().then((code) => {
      if (this.expected.has(n.spec.name)) return;
      this.crashes.push({ node: n.spec.name, code, at: Date.now() });
      this.note(`CRASH: ${n.spec.name} exited with ${code}`);
    });
  }

  /** One client: sends without pause through the next node that is up, until the run ends. */
  async client(): Promise<void> {
    while (this.running) {
      const live = this.cluster.nodes.filter((n) => this.up.has(n.spec.name));
      const via = live[this.turn++ % Math.max(1, live.length)];
      if (!via) {
        await sleep(50);
        continue;
      }
      this.requests.push(await chatOnce(via, this.o.model, this.o.maxTokens ?? 8, this.phase));
    }
  }

  /** Reads each node's /metrics (memory, largest bus message) and /state (its session's index). */
  async sample(): Promise<void> {
    for (const n of this.cluster.nodes) {
      if (!this.up.has(n.spec.name)) continue;
      try {
        const text = await (
          await fetch(`${n.apiUrl}/metrics`, {
            headers: n.authHeaders,
            signal: AbortSignal.timeout(3000),
          })
        ).text();
        const rss = metric(text, "process_resident_memory_bytes");
        if (rss !== undefined)
          (this.memory[n.spec.name] ??= []).push([
            Math.round((Date.now() - this.t0) / 1000),
            rss / 2 ** 20,
          ]);
        for (const m of text.matchAll(
          /^ic_bus_message_max_bytes\{[^}]*name="([^"]+)"[^}]*\} (\d+)/gm,
        ))
          this.largest[m[1]!] = Math.max(this.largest[m[1]!] ?? 0, Number(m[2]));
        const s = await n.get<StateDoc>("/state?links=0", 3000);
        if (s.session)
          this.sessionIndex.set(
            s.session.session_id,
            Math.max(this.sessionIndex.get(s.session.session_id) ?? 0, s.index),
          );
      } catch {
        // a node going down between the check and the read
      }
    }
  }

  async runPhase(i: number, p: SoakPhase, deploymentIds: readonly string[]): Promise<void> {
    this.phase = `${i + 1}:${p.kind}${p.kind === "full" ? `-${p.signal}` : ""}`;
    this.note(`phase ${this.phase}`);
    if (p.kind === "load") {
      await sleep(p.seconds * 1000);
    } else if (p.kind === "rolling") {
      await this.rollingRestart(deploymentIds);
    } else {
      await this.fullRestart(p.signal, deploymentIds);
    }
  }

  /** Each node in turn, the master first: SIGTERM, start, wait until everything serves again. */
  private async rollingRestart(deploymentIds: readonly string[]): Promise<void> {
    const masterFirst = await orderMasterFirst(this.cluster);
    for (const n of masterFirst) {
      const began = Date.now();
      await this.stopNode(n, "SIGTERM");
      await this.startNode(n);
      await servesAgain(this.cluster, deploymentIds, this.o.model);
      const ms = Date.now() - began;
      this.recoveries.push({ phase: `${this.phase} ${n.spec.name}`, ms });
      this.note(`  ${n.spec.name} restarted; serving again after ${ms} ms`);
    }
  }

  private async fullRestart(
    signal: "SIGTERM" | "SIGKILL",
    deploymentIds: readonly string[],
  ): Promise<void> {
    const nodes = this.cluster.nodes;
    const began = Date.now();
    await Promise.all(nodes.map((n) => this.stopNode(n, signal)));
    // All at once, as `docker compose up` or a power-on does.
    await Promise.all(nodes.map((n) => this.startNode(n)));
    const started = Date.now();
    await servesAgain(this.cluster, deploymentIds, this.o.model);
    const ms = Date.now() - began;
    this.recoveries.push({ phase: this.phase, ms, afterStartMs: Date.now() - started });
    this.note(
      `  every node restarted; serving again ${Date.now() - started} ms after all started (${ms} ms in all)`,
    );
  }

  private async stopNode(n: NodeProcess, signal: "SIGTERM" | "SIGKILL"): Promise<void> {
    const from = Date.now();
    this.expected.add(n.spec.name);
    this.up.delete(n.spec.name);
    if (signal === "SIGKILL") {
      n.kill("SIGKILL");
      await n.waitExit();
    } else await n.stop();
    this.stopWindows.push({ node: n.spec.name, from, to: Date.now() });
  }

  private async startNode(n: NodeProcess): Promise<void> {
    await n.start(120_000);
    this.expected.delete(n.spec.name);
    this.watchExit(n);
    this.up.add(n.spec.name);
  }

  report(): SoakReport {
    return {
      seconds: (Date.now() - this.t0) / 1000,
      requests: this.requests,
      crashes: this.crashes,
      largestBusMessage: this.largest,
      eventsSequenced: [...this.sessionIndex.values()].reduce((a, b) => a + b, 0),
      memory: this.memory,
      recoveries: this.recoveries,
      stopWindows: this.stopWindows,
    };
  }
}

/** The nodes with the current master first (a rolling restart's hardest step). */
async function orderMasterFirst(cluster: HostCluster): Promise<NodeProcess[]> {
  const doc = await cluster.nodes[0]!.get<{
    node_identities: { name: string; is_master: boolean }[];
  }>("/state");
  const master = doc.node_identities.find((n) => n.is_master)?.name;
  return [...cluster.nodes].sort(
    (a, b) => Number(b.spec.name === master) - Number(a.spec.name === master),
  );
}

/** Waits until every node lists the deployments, each with a ready instance, and chat answers 200 through each. */
async function servesAgain(
  cluster: HostCluster,
  ids: readonly string[],
  model: string,
): Promise<void> {
  const want = JSON.stringify([...ids].sort());
  await waitFor(
    async () => {
      for (const n of cluster.nodes) {
        const d = await n.get<StateDoc>("/state?links=0", 3000).catch(() => undefined);
        if (!d || JSON.stringify(d.deployments.map((x) => x.deployment_id).sort()) !== want)
          return undefined;
        const ready = d.deployments.every((x) =>
          d.instances
            .find((i) => i.instance_id === x.instance_id)
            ?.runners.some((r) => r.rank === 0 && r.state === "RunnerReady"),
        );
        if (!ready) return undefined;
        if ((await chatOnce(n, model, 2, "probe")).status !== 200) return undefined;
      }
      return true;
    },
    {
      timeoutMs: 180_000,
      intervalMs: 100,
      what: "every deployment serving again through every node",
    },
  );
}

/** One non-streaming chat request; its outcome, never a throw. */
export async function chatOnce(
  n: NodeProcess,
  model: string,
  maxTokens: number,
  phase: string,
): Promise<RequestOutcome> {
  const startedAt = Date.now();
  const done = (status: number, code: string, retryable: boolean | undefined): RequestOutcome => ({
    via: n.spec.name,
    phase,
    startedAt,
    endedAt: Date.now(),
    status,
    code,
    retryable,
  });
  try {
    const r = await n.post(
      "/v1/chat/completions",
      { model, messages: [{ role: "user", content: "hi" }], max_tokens: maxTokens },
      { signal: AbortSignal.timeout(60_000) },
    );
    const text = await r.text();
    if (r.status === 200) return done(200, "ok", undefined);
    try {
      const e = (JSON.parse(text) as { error?: { code?: string; retryable?: boolean } }).error;
      return done(r.status, e?.code ?? `http_${r.status}`, e?.retryable);
    } catch {
      return done(r.status, `http_${r.status}`, undefined);
    }
  } catch {
    return done(0, "connection", undefined);
  }
}

function metric(text: string, name: string): number | undefined {
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)`, "m").exec(text);
  return m ? Number(m[1]) : undefined;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Failures a soak allows: a typed retryable error, or a connection failure through a node that was
 * being stopped at that moment (its in-flight requests). Everything else is returned.
 */
export function unexplainedFailures(r: SoakReport): RequestOutcome[] {
  return r.requests.filter((q) => {
    if (q.code === "ok") return false;
    if (q.retryable === true) return false;
    if (q.code === "connection")
      return !r.stopWindows.some(
        (w) => w.node === q.via && q.startedAt <= w.to && q.endedAt >= w.from - 1000,
      );
    return true;
  });
}

/** Counts of outcomes per code, and per phase. */
export function tally(r: SoakReport): {
  byCode: Record<string, number>;
  byPhase: Record<string, Record<string, number>>;
} {
  const byCode: Record<string, number> = {};
  const byPhase: Record<string, Record<string, number>> = {};
  for (const q of r.requests) {
    byCode[q.code] = (byCode[q.code] ?? 0) + 1;
    const p = (byPhase[q.phase] ??= {});
    p[q.code] = (p[q.code] ?? 0) + 1;
  }
  return { byCode, byPhase };
}
