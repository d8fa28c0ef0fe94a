// One OS process of bench/scale hosting some simulated nodes: a real ClusterAgent per node, each on its
// own Bus connection to one of the benchmark's nats-servers, fed by a worker stand-in (stand-in.ts).
// Driven by main.ts over IPC (wire.ts); reports each agent's (session, synced, members) as it changes.
import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import { Writable } from "node:stream";
import { Session } from "node:inspector/promises";
import { Bus } from "@ic/bus";
import { createLogger } from "@ic/log";
import { ClusterAgent } from "@ic/cluster";
import { mulberry32, systemClock } from "@ic/protocol";
import { assignmentsOf, placeInCluster } from "@ic/placement";
import type { InstanceId, ModelId, ModelRecord } from "@ic/protocol";
import { LoopDelay, WorkerStandIn } from "./stand-in.ts";
import type { AgentSpec, AgentStatus, FromHost, Sizes, ToHost } from "./wire.ts";

/** Log lines by message since the orchestrator last asked (the lines themselves are not kept). */
let logCounts = new Map<string, number>();
/** Lines whose message matches BENCH_LOG_SAMPLE (a regular expression), a few per phase. */
const SAMPLE = process.env.BENCH_LOG_SAMPLE ? new RegExp(process.env.BENCH_LOG_SAMPLE) : undefined;
let samples: string[] = [];
// Lines are counted by message (the orchestrator reports them per phase); warnings and errors also
// go to stderr. Printing 100 agents' lines would cost more CPU than the control plane measured.
const log = createLogger({
  enabled: true,
  level: process.env.BENCH_LOG_LEVEL ?? "info",
  destination: new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const line of chunk.toString().split("\n")) {
        if (!line) continue;
        const rec = JSON.parse(line) as { level: number; msg: string };
        logCounts.set(rec.msg, (logCounts.get(rec.msg) ?? 0) + 1);
        if (SAMPLE && SAMPLE.test(rec.msg) && samples.length < 40) samples.push(line.slice(0, 400));
        if (rec.level >= 40 && process.env.BENCH_VERBOSE) process.stderr.write(`${line}\n`);
      }
      cb();
    },
  }),
});

interface Hosted {
  readonly spec: AgentSpec;
  readonly bus: Bus;
  readonly agent: ClusterAgent;
  readonly worker: WorkerStandIn;
  last: string;
}

const hosted: Hosted[] = [];
const loop = new LoopDelay();
let loopTimer: NodeJS.Timeout | undefined;
let gone = new Set<string>();
let pending: AgentStatus[] = [];
let flushTimer: NodeJS.Timeout | undefined;
let profiler: Session | undefined;
/** Heartbeat delivery lags (ms, send -> handled by an agent here) since the orchestrator last asked. */
let lags: number[] = [];
let heartbeatMs = 2000;

function send(m: FromHost): void {
  process.send?.(m);
}

/** Records an agent's status when it changed; sent in batches every 20 ms. */
function observe(h: Hosted): void {
  const a = h.agent;
  const s = a.snapshot();
  const synced = a.synced;
  let members = 0;
  let clean = true;
  if (synced) {
    for (const m of Object.values(s.members)) {
      members++;
      if (gone.has(m.peer_key)) clean = false;
    }
  }
  const key = `${a.sessionId}|${synced}|${members}|${clean}|${a.isMaster}`;
  if (key === h.last) return;
  h.last = key;
  pending.push({
    i: h.spec.index,
    at: Date.now(),
    session: a.sessionId,
    synced,
    members,
    clean,
    master: a.isMaster,
  });
  flushTimer ??= setTimeout(() => {
    flushTimer = undefined;
    const updates = pending;
    pending = [];
    send({ t: "status", updates });
  }, 20);
}

async function init(m: Extract<ToHost, { t: "init" }>): Promise<void> {
  const random = mulberry32(m.seed);
  heartbeatMs = m.timings.heartbeatMs;
  for (const spec of m.agents) {
    const bus = await Bus.connect(spec.natsUrl, log, {
      name: spec.name,
      user: m.user,
      password: m.password,
    });
    const worker = new WorkerStandIn({
      index: spec.index,
      random,
      heartbeatMs: m.timings.heartbeatMs,
      loop,
    });
    const agent = new ClusterAgent({
      bus,
      log: log.child({ node: spec.name }),
      clock: systemClock,
      self: {
        peerKey: spec.peerKey,
        name: spec.name,
        host: worker.host,
        apiUrl: `http://${worker.host}:8080`,
        startedAt: spec.startedAt,
      },
      timings: m.timings,
      extras: () => worker.extras(),
    });
    worker.attach(agent);
    // As node.ts does: its own heartbeat back from the bus confirms the telemetry samples it carried.
    bus.subscribe("heartbeat", (hb) => {
      if (hb.peer_key === spec.peerKey) worker.published(hb.sent_at);
      // The bench's own reading: how long after it was sent a heartbeat is handled here.
      lags.push(Date.now() - hb.sent_at);
    });
    const h: Hosted = { spec, bus, agent, worker, last: "" };
    agent.on({
      event: () => observe(h),
      snapshot: () => observe(h),
      session: () => observe(h),
    });
    hosted.push(h);
  }
  send({ t: "ready" });
}

function start(): void {
  loop.start();
  loopTimer = setInterval(() => loop.roll(), heartbeatMs);
  for (const h of hosted) {
    h.agent.start();
    h.worker.start();
  }
  send({ t: "started", at: Date.now() });
}

async function sizes(): Promise<Sizes> {
  const h = hosted[0]!;
  const a = h.agent;
  const hb = a.heartbeat();
  let syncFromStart = 0;
  let events = 0;
  const session = a.sessionId;
  if (session) {
    const reply = await h.bus.request(
      "masterSync",
      { session_id: session, from_index: 1 },
      { timeoutMs: 5000, suffix: session },
    );
    syncFromStart = Buffer.byteLength(JSON.stringify(reply));
    events = reply.ok ? reply.events.length : 0;
  }
  return {
    heartbeat: Buffer.byteLength(JSON.stringify(hb)),
    heartbeatLinks: Buffer.byteLength(JSON.stringify(hb.links)),
    view: {
      peerKey: a.peerKey,
      name: h.spec.name,
      synced: a.synced,
      isMaster: a.isMaster,
      sessionId: a.sessionId,
      nodeId: a.nodeId,
      snapshot: a.snapshot(),
      livePeers: a.livePeers(),
    },
    replica: Buffer.byteLength(JSON.stringify(a.snapshot())),
    syncFromStart,
    events,
  };
}

/** Models of the workload: a 7B, a 32B and a 70B GGUF, each placed on two nodes (Pipeline). */
const MODELS: readonly ModelRecord[] = [
  ["bench/llama-3.1-8b-q4", 4.9e9, 32, 4096, 32, 8],
  ["bench/qwen-2.5-32b-q4", 19.9e9, 64, 5120, 40, 8],
  ["bench/llama-3.1-70b-q4", 42.5e9, 80, 8192, 64, 8],
].map(([id, bytes, layers, width, heads, kv]) => ({
  model_id: id as ModelId,
  file: "model.gguf",
  bytes: bytes as number,
  architecture: "llama",
  layers: layers as number,
  context_length: 131072,
  embedding_length: width as number,
  head_count: heads as number,
  head_count_kv: kv as number,
  supports_tensor: true,
}));

const reports = (a: ClusterAgent) => a.livePeers().map((p) => p.heartbeat);

/** As the gateway's POST /place_instance: pure placement on this node's view, then the command. */
async function workload(
  instances: number,
): Promise<{ placed: number; refused: string[]; index: number }> {
  const a = hosted[0]!.agent;
  for (const model of MODELS) await a.command({ type: "RegisterModel", model });
  let placed = 0;
  const refused: string[] = [];
  for (let i = 0; i < instances; i++) {
    const model = MODELS[i % MODELS.length]!;
    // As the gateway: a view still missing some node's memory or links is waited for (15 s).
    const deadline = Date.now() + 15_000;
    let state = a.snapshot();
    let r = placeInCluster(state, reports(a), { model, minNodes: 2, sharding: "Pipeline" });
    while (!r.ok && r.code === "info_pending" && Date.now() < deadline) {
      await new Promise((res) => setTimeout(res, 200));
      state = a.snapshot();
      r = placeInCluster(state, reports(a), { model, minNodes: 2, sharding: "Pipeline" });
    }
    if (!r.ok) {
      refused.push(r.code);
      continue;
    }
    try {
      await a.command({
        type: "PlaceInstance",
        instance: {
          instance_id: `i-${randomUUID()}` as InstanceId,
          model_id: model.model_id,
          sharding: "Pipeline",
          created_at: Date.now(),
          assignments: assignmentsOf(state, r.shares),
        },
        deployment: { min_nodes: 2, sharding: "Pipeline", excluded_nodes: [] },
      });
      placed++;
    } catch (e) {
      refused.push((e as { code?: string }).code ?? String(e));
    }
  }
  return { placed, refused, index: a.snapshot().index };
}

async function reportRunners(index: number): Promise<number> {
  let n = 0;
  await Promise.all(
    hosted.map(async (h) => {
      const deadline = Date.now() + 30_000;
      while (h.agent.snapshot().index < index || !h.agent.synced) {
        if (Date.now() > deadline) throw new Error(`${h.spec.name} never reached index ${index}`);
        await new Promise((r) => setTimeout(r, 20));
      }
      for (const runner of h.worker.runners()) {
        await h.agent.command({ type: "ReportRunner", runner });
        n++;
      }
    }),
  );
  return n;
}

async function stop(): Promise<void> {
  clearInterval(loopTimer);
  loop.stop();
  for (const h of hosted) {
    h.worker.stop();
    await h.agent.stop();
  }
  await Promise.all(hosted.map((h) => h.bus.close()));
  process.exit(0);
}

async function handle(m: ToHost): Promise<void> {
  switch (m.t) {
    case "init":
      return init(m);
    case "start":
      return start();
    case "watch":
      gone = new Set(m.gone);
      hosted.forEach(observe);
      return send({ t: "watching" });
    case "sizes":
      return send({ t: "sizes", sizes: await sizes() });
    case "workload":
      return send({ t: "workload", ...(await workload(m.instances)) });
    case "report-runners":
      return send({ t: "runners", reported: await reportRunners(m.index) });
    case "connection-lost":
      for (const h of hosted)
        void h.agent.connectionLost(m.peerKey, m.startedAt, "bench: watch connection closed");
      return;
    case "heard": {
      const p = hosted[0]?.agent.livePeers().find((x) => x.heartbeat.peer_key === m.peerKey);
      return send({ t: "heard", at: p ? p.lastHeard : null });
    }
    case "profile-start":
      profiler = new Session();
      profiler.connect();
      await profiler.post("Profiler.enable");
      await profiler.post("Profiler.start");
      return;
    case "profile-stop": {
      const s = profiler;
      if (!s) return send({ t: "error", message: "no profile running" });
      const { profile } = await s.post("Profiler.stop");
      s.disconnect();
      profiler = undefined;
      writeFileSync(m.file, JSON.stringify(profile));
      return send({ t: "profiled", file: m.file });
    }
    case "logs": {
      const counts = Object.fromEntries(logCounts);
      logCounts = new Map();
      for (const l of samples) process.stderr.write(`${l}\n`);
      samples = [];
      return send({ t: "logs", counts });
    }
    case "lag": {
      const sorted = lags.sort((x, y) => x - y);
      lags = [];
      const q = (p: number) =>
        sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? 0;
      return send({ t: "lag", n: sorted.length, p50: q(0.5), p99: q(0.99), max: q(1) });
    }
    case "stop":
      return stop();
  }
}

process.on("message", (m: ToHost) => {
  handle(m).catch((e: unknown) =>
    send({ t: "error", message: e instanceof Error ? (e.stack ?? e.message) : String(e) }),
  );
});
// The orchestrator went away: leave nothing behind.
process.on("disconnect", () => void stop());
