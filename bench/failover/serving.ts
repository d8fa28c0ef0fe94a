// Failover bench, node lost -> model serving again: on a fresh 3-node host cluster, a plain runner
// start (POST /place_instance -> the first 200 chat), then kill -9 of its holder -> the first 200 again.
import { startHostCluster, waitFor, waitForConvergence } from "@ic/testkit";
import type { HostCluster, NodeProcess } from "@ic/testkit";
import {
  CHAT_POLL_MS,
  SERVE_DEADLINE_MS,
  SILENCE_PROBE_MS,
  TIMINGS,
  logged,
  sleep,
} from "./common.ts";
import type { ChatBody, Doc, LogLine } from "./common.ts";

/** Milliseconds, per run. Times of steps are from the run's origin (the POST, or the kill). */
export interface ServeSample {
  /** POST /place_instance on a fresh node (nothing staged) -> the first 200 chat: a plain runner start. */
  start: number;
  /** The plain start's steps on its holder (from the POST). */
  startSteps: Steps;
  /** kill -9 of the holder -> the first 200 chat through a survivor. */
  served: number;
  /** The steps after the kill: the master's decisions, then the new holder's steps. */
  servedSteps: Steps;
  /** How long the master had not heard the victim at the kill. */
  silentAtKill: number;
  /** "deployment pending" lines of the master between the kill and the re-placement (retries). */
  pending: number;
  /** Bytes the new holder fetched from the store host, and reused from a staged copy. */
  fetchedBytes?: number;
  reusedBytes?: number;
  /** Bytes the first holder fetched from the store host for the plain start. */
  startFetchedBytes?: number;
  holder: string;
  newHolder: string;
  /** The answers to the chat polls after the kill, before the first 200: "status code" -> count. */
  answers: Record<string, number>;
}

export interface Steps {
  /** The master's "node lost (...)" line (kills only). */
  lost?: number;
  /** The master's "deployment placed again" line (kills only). */
  placed?: number;
  /** The holder's "staging admitted" (a transfer from the store host begins). */
  admitted?: number;
  /** The holder's "staged" (the copy is complete). */
  staged?: number;
  /** The holder's "starting runner" (llama-server spawned). */
  spawned?: number;
  /** The holder's "runner ready" (llama-server's /health answered 200). */
  ready?: number;
}

/**
 * Polls a 2-token chat completion through `via` every CHAT_POLL_MS (or right after a slower answer)
 * until it answers 200; returns the ms from `t0` to that answer, counting the other answers.
 */
async function untilServed(
  via: NodeProcess,
  model: string,
  t0: number,
  answers: Record<string, number>,
): Promise<number> {
  for (;;) {
    const sent = Date.now();
    if (sent - t0 > SERVE_DEADLINE_MS)
      throw new Error(`${model} not served ${SERVE_DEADLINE_MS} ms: ${JSON.stringify(answers)}`);
    let key: string;
    try {
      const r = await via.post(
        "/v1/chat/completions",
        { model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 },
        { signal: AbortSignal.timeout(10_000) },
      );
      const text = await r.text();
      let body: ChatBody = {};
      try {
        body = JSON.parse(text) as ChatBody;
      } catch {
        // not JSON: counted by status alone
      }
      if (r.status === 200) {
        if (body.usage?.completion_tokens !== 2)
          throw new Error(`200 without 2 completion tokens: ${text.slice(0, 300)}`);
        return Date.now() - t0;
      }
      key = `${r.status} ${body.error?.code ?? "?"}`;
    } catch (e) {
      if (e instanceof Error && e.message.startsWith("200 without")) throw e;
      key = `no answer (${e instanceof Error ? e.name : "error"})`;
    }
    answers[key] = (answers[key] ?? 0) + 1;
    await sleep(Math.max(0, sent + CHAT_POLL_MS - Date.now()));
  }
}

/** A node's JSON log line (the fields the steps read). */
interface StepLine extends LogLine {
  instance?: string;
  fetchedBytes?: number;
  reusedBytes?: number;
}

function stepLine(
  node: NodeProcess,
  since: number,
  match: (l: StepLine) => boolean,
): StepLine | undefined {
  let found: StepLine | undefined;
  logged(node, since, (l) => {
    if (!match(l)) return false;
    found = l;
    return true;
  });
  return found;
}

/** The holder's steps of one runner start (the first of each at or after `since`), from `t0`. */
function holderSteps(node: NodeProcess, since: number, t0: number): Steps {
  const at = (msg: string) => logged(node, since, (l) => l.msg === msg);
  const rel = (t: number | undefined) => (t === undefined ? undefined : t - t0);
  const out: Steps = {};
  const steps = [
    ["admitted", "staging admitted"],
    ["staged", "staged"],
    ["spawned", "starting runner"],
    ["ready", "runner ready"],
  ] as const;
  for (const [k, msg] of steps) {
    const t = rel(at(msg));
    if (t !== undefined) out[k] = t;
  }
  return out;
}

/** The plain runner start: when it was placed, how long to the first 200, and who holds it. */
interface PlainStart {
  placedAt: number;
  start: number;
  holder: NodeProcess;
  newHolder: NodeProcess;
}

/** The kill of the holder: when, how long to the first 200 again, and what the polls got before. */
interface Killed {
  killedAt: number;
  served: number;
  silentAtKill: number;
  answers: Record<string, number>;
}

/** Waits for the cluster to converge and the model to be registered; node-1's document and id. */
async function untilRegistered(
  cluster: HostCluster,
  modelId: string,
): Promise<{ doc: Pick<Doc, "node_identities">; node1: string }> {
  const [doc] = await waitForConvergence(cluster.nodes, 3, 60_000);
  const n1 = cluster.node("node-1");
  const node1 = doc!.node_identities.find((n) => n.name === "node-1")!.node_id;
  await waitFor(
    async () => {
      const s = await n1.get<{ models: { model_id: string }[] }>("/state");
      return s.models.some((m) => m.model_id === modelId) ? true : undefined;
    },
    { timeoutMs: 30_000, intervalMs: 50, what: `${modelId} registered` },
  );
  return { doc: doc!, node1 };
}

/**
 * The plain runner start: the only instance, on node-2 or node-3 (node-1, the store host and
 * master, excluded; the exclusion stays with the deployment, so it is placed again on the other).
 */
async function plainStart(
  cluster: HostCluster,
  modelId: string,
  doc: Pick<Doc, "node_identities">,
  node1: string,
): Promise<PlainStart> {
  const n1 = cluster.node("node-1");
  const placedAt = Date.now();
  const r = await n1.post("/place_instance", {
    model_id: modelId,
    min_nodes: 1,
    excluded_nodes: [node1],
  });
  const placed = (await r.json()) as {
    instance?: { instance_id: string; assignments: { node_id: string }[] };
  };
  if (r.status !== 200 || !placed.instance)
    throw new Error(`place_instance ${r.status}: ${JSON.stringify(placed)}`);
  const start = await untilServed(n1, modelId, placedAt, {});
  const holderId = placed.instance.assignments[0]!.node_id;
  const holder = cluster.node(doc.node_identities.find((n) => n.node_id === holderId)!.name);
  const newHolder = cluster.nodes.find((n) => n !== holder && n !== n1)!;
  return { placedAt, start, holder, newHolder };
}

/** Kills the holder at a random point of the heartbeat cycle; polls through node-1 until served. */
async function killHolder(
  cluster: HostCluster,
  modelId: string,
  holder: NodeProcess,
): Promise<Killed> {
  const n1 = cluster.node("node-1");
  // Kill at a random point of the heartbeat cycle, as above; the chat polls go through node-1.
  await sleep(1000 + Math.random() * TIMINGS.heartbeat_ms);
  const killedAt = Date.now();
  holder.kill("SIGKILL");
  const answers: Record<string, number> = {};
  const servedP = untilServed(n1, modelId, killedAt, answers);
  servedP.catch(() => {});
  await sleep(SILENCE_PROBE_MS);
  const t1 = Date.now();
  const topo = await n1.get<Doc>("/state", 5000);
  const lastHeard = topo.topology.nodes.find((n) => n.name === holder.spec.name);
  const silentAtKill = lastHeard
    ? killedAt - ((t1 + Date.now()) / 2 - lastHeard.last_heard_ms_ago)
    : NaN;
  const served = await servedP;
  await sleep(300); // the last log lines are still in their pipes
  return { killedAt, served, silentAtKill, answers };
}

/** The run's sample: the two starts' steps from the master's and the holders' log lines. */
function servingSample(cluster: HostCluster, plain: PlainStart, killed: Killed): ServeSample {
  const n1 = cluster.node("node-1");
  const { placedAt, start, holder, newHolder } = plain;
  const { killedAt, served, silentAtKill, answers } = killed;
  const rel = (t: number | undefined) => (t === undefined ? undefined : t - killedAt);
  const lost = rel(logged(n1, killedAt, (l) => l.msg?.startsWith("node lost (") === true));
  const placedAgain = rel(logged(n1, killedAt, (l) => l.msg === "deployment placed again"));
  let pending = 0;
  logged(n1, killedAt, (l) => {
    if (l.msg === "deployment pending") pending++;
    return false;
  });
  const stagedLine = stepLine(newHolder, killedAt, (l) => l.msg === "staged");
  const servedSteps: Steps = { ...holderSteps(newHolder, killedAt, killedAt) };
  if (lost !== undefined) servedSteps.lost = lost;
  if (placedAgain !== undefined) servedSteps.placed = placedAgain;
  const out: ServeSample = {
    start,
    startSteps: holderSteps(holder, placedAt, placedAt),
    served,
    servedSteps,
    silentAtKill,
    pending,
    holder: holder.spec.name,
    newHolder: newHolder.spec.name,
    answers,
  };
  if (stagedLine?.fetchedBytes !== undefined) out.fetchedBytes = stagedLine.fetchedBytes;
  if (stagedLine?.reusedBytes !== undefined) out.reusedBytes = stagedLine.reusedBytes;
  const firstStaged = stepLine(holder, placedAt, (l) => l.msg === "staged");
  if (firstStaged?.fetchedBytes !== undefined) out.startFetchedBytes = firstStaged.fetchedBytes;
  return out;
}

/** One "node lost -> model serving again" run on a fresh cluster; node-1 stores from `store`. */
export async function onceServing(store: string, modelId: string): Promise<ServeSample> {
  await using cluster = await startHostCluster(3, {
    // node-1 is the store host (and the first master); info level for the steps' log lines.
    config: (i) => ({
      cluster: TIMINGS,
      logging: { level: "info" },
      ...(i === 0 ? { store_path: store } : {}),
    }),
  });
  const { doc, node1 } = await untilRegistered(cluster, modelId);
  const plain = await plainStart(cluster, modelId, doc, node1);
  const killed = await killHolder(cluster, modelId, plain.holder);
  return servingSample(cluster, plain, killed);
}
