// Failover bench, the kill scenarios: one fresh 3-node host cluster per run, the master or a worker
// killed (or a worker's host cut off), timed from the survivors' /state polls and log lines.
import { HOST_PORTS, placeAndWait, startHostCluster, waitForConvergence } from "@ic/testkit";
import type { HostCluster, NodeProcess } from "@ic/testkit";
import {
  POLL_MS,
  SILENCE_PROBE_MS,
  TIMINGS,
  brief,
  isMaster,
  logged,
  sleep,
  states,
} from "./common.ts";
import type { ChatBody, Doc, Kind, Sample } from "./common.ts";

const ROUTE_PORT = String(HOST_PORTS.cluster);

/**
 * The nats route connections of every host: with a delay every one must run through a relay (an
 * outbound one to a relay's port, an inbound one from the root namespace's address), without one
 * straight to the other hosts. A route that bypasses its relay would measure the wrong thing, so
 * that throws. (nats keeps one connection per pair of servers, so a host may hold either end.)
 */
async function checkRoutes(cluster: HostCluster, delayMs: number): Promise<void> {
  const { lab } = cluster;
  const hostIps = new Set(lab.hosts.map((h) => h.address));
  const relays = new Set(cluster.relays.map((r) => r.address));
  // "10.0.0.1:6222" or "[::ffff:10.0.0.1]:6222" -> ["10.0.0.1", "6222"]
  const split = (a: string): [string, string] => [
    a.slice(0, a.lastIndexOf(":")).replace(/^\[(?:::ffff:)?|\]$/g, ""),
    a.slice(a.lastIndexOf(":") + 1),
  ];
  for (const h of lab.hosts) {
    const out = await lab.run(h.name, "ss", ["-tnH", "state", "established"]);
    const routes: { peer: string; relayed: boolean }[] = [];
    for (const line of out.split("\n")) {
      const [, , local = "", peer = ""] = line.trim().split(/\s+/);
      if (!peer) continue;
      const [, localPort] = split(local);
      const [peerIp, peerPort] = split(peer);
      const toRelay = relays.has(`${peerIp}:${peerPort}`);
      if (localPort === ROUTE_PORT || peerPort === ROUTE_PORT || toRelay)
        routes.push({
          peer: `${peerIp}:${peerPort}`,
          relayed: toRelay || (localPort === ROUTE_PORT && peerIp === lab.rootAddress),
        });
    }
    const ok =
      routes.length >= lab.hosts.length - 1 &&
      routes.every((r) => (delayMs ? r.relayed : !r.relayed && hostIps.has(split(r.peer)[0])));
    if (!ok)
      throw new Error(
        `${h.name}: route connections ${JSON.stringify(routes)}; expected ${delayMs ? "every one through a relay" : "straight to the other hosts"}`,
      );
  }
}

interface ChatOutcome {
  kind: "stream" | "plain";
  ended: number;
  outcome: string;
}

/**
 * One request on `model` through `via`, generating long enough to outlast a failover; `opened`
 * resolves once it is generating (a streamed chunk, or for the plain one the stream's), `done` with
 * its end as seen by the client: ms since the epoch and "200" or "<status> <code>".
 */
function openChat(via: NodeProcess, model: string, stream: boolean) {
  let opened!: () => void;
  const isOpen = new Promise<void>((r) => (opened = r));
  const done = (async (): Promise<{ at: number; outcome: string }> => {
    const r = await via.post("/v1/chat/completions", {
      model,
      stream,
      max_tokens: 3000,
      messages: [{ role: "user", content: "Write a very long story about the sea." }],
    });
    if (!stream) {
      const body = (await r.json().catch(() => ({}))) as ChatBody;
      return {
        at: Date.now(),
        outcome: `${r.status}${r.status === 200 ? "" : ` ${body.error?.code ?? "?"}`}`,
      };
    }
    if (r.status !== 200 || !r.body) return { at: Date.now(), outcome: `${r.status} (no stream)` };
    let text = "";
    const decoder = new TextDecoder();
    for await (const chunk of r.body) {
      text += decoder.decode(chunk as Uint8Array, { stream: true });
      if (text.includes("data: ")) opened();
    }
    const code = /"code":"([a-z_]+)"/.exec(text.slice(-2000))?.[1];
    return {
      at: Date.now(),
      outcome: code ? `stream error ${code}` : text.includes("[DONE]") ? "200" : "stream cut",
    };
  })();
  if (!stream) opened();
  return { isOpen, done };
}

/** Who is who in one kill run: the victim, the survivors, and the session before the kill. */
interface Roles {
  oldSession: string;
  victim: NodeProcess;
  survivors: NodeProcess[];
  victimName: string;
}

/** A request open on the victim's instance at the kill. */
interface OpenedChat {
  kind: "stream" | "plain";
  done: Promise<{ at: number; outcome: string }>;
}

/** What the poll saw after the kill: ms from the kill, and the survivors' last /state documents. */
interface Polled {
  session: number | undefined;
  gone: number;
  last: Doc[];
}

/**
 * Waits for the cluster to converge, checks its routes, picks the victim (the master, or the last
 * worker) and, for worker kills, places the model's only instance on the victim.
 */
async function prepare(
  cluster: HostCluster,
  kind: Kind,
  delayMs: number,
  modelId: string,
): Promise<Roles> {
  const [first] = await waitForConvergence(cluster.nodes, 3, 60_000);
  await checkRoutes(cluster, delayMs);
  const before = await states(cluster.nodes);
  const oldSession = before[0]!.session!.session_id;
  const masterAt = before.findIndex(isMaster);
  if (masterAt < 0) throw new Error("converged, but no node says it is the master");
  const master = cluster.nodes[masterAt]!;
  const victim = kind === "master" ? master : cluster.nodes.filter((n) => n !== master).at(-1)!;
  const survivors = cluster.nodes.filter((n) => n !== victim);
  const victimName = victim.spec.name;
  if (kind === "worker") {
    // The model's only instance on the victim; its requests go through node-1's gateway.
    const others = first!.node_identities
      .filter((n) => n.name !== victimName)
      .map((n) => n.node_id);
    const n1 = cluster.node("node-1");
    await placeAndWait(n1, { model_id: modelId, min_nodes: 1, excluded_nodes: others });
  }
  return { oldSession, victim, survivors, victimName };
}

/** Worker kills: one streaming and one plain chat through node-1, both generating. */
async function openChats(cluster: HostCluster, modelId: string): Promise<OpenedChat[]> {
  const n1 = cluster.node("node-1");
  const opened = (["stream", "plain"] as const).map((k) => ({
    k,
    ...openChat(n1, modelId, k === "stream"),
  }));
  await Promise.all(opened.map((o) => o.isOpen));
  return opened.map((o) => ({ kind: o.k, done: o.done }));
}

/** When each survivor last heard the victim (any delayed in-flight message has landed by now). */
async function lastHeard(
  survivors: readonly NodeProcess[],
  victimName: string,
): Promise<Map<string, number>> {
  await sleep(SILENCE_PROBE_MS);
  const heardAt = new Map<string, number>();
  const t0 = Date.now();
  const docs = await states(survivors);
  const mid = (t0 + Date.now()) / 2;
  for (const d of docs) {
    const v = d.topology.nodes.find((n) => n.name === victimName);
    if (v) heardAt.set(d.this_node.name, mid - v.last_heard_ms_ago);
  }
  return heardAt;
}

/** Polls the survivors every POLL_MS until the victim is gone (master kills: in one new session). */
async function untilGone(kind: Kind, roles: Roles, killedAt: number): Promise<Polled> {
  const { oldSession, survivors, victimName } = roles;
  let session: number | undefined;
  let gone: number | undefined;
  let last: Doc[] = [];
  while (gone === undefined) {
    if (Date.now() - killedAt > 30_000)
      throw new Error(
        `${kind} failover not complete 30 s after the kill: ${JSON.stringify(last.map(brief))}`,
      );
    try {
      last = await states(survivors);
    } catch {
      await sleep(POLL_MS);
      continue;
    }
    const t = Date.now() - killedAt;
    const ids = new Set(last.map((d) => d.session?.session_id));
    const oneNewSession =
      ids.size === 1 &&
      !ids.has(undefined) &&
      !ids.has(oldSession) &&
      last.every((d) => d.this_node.synced);
    const victimGone = last.every(
      (d) =>
        d.node_identities.length === survivors.length &&
        !d.node_identities.some((n) => n.name === victimName),
    );
    if (kind === "master") {
      if (oneNewSession) session ??= t;
      if (oneNewSession && victimGone) gone = t;
    } else if (victimGone) gone = t;
    if (gone === undefined) await sleep(POLL_MS);
  }
  return { session, gone, last };
}

/** How each open request ended, in ms from the kill (waiting at most 30 s for each). */
async function requestOutcomes(
  chats: readonly OpenedChat[],
  killedAt: number,
): Promise<ChatOutcome[]> {
  const requests: ChatOutcome[] = [];
  for (const c of chats) {
    const r = await Promise.race([c.done, sleep(30_000).then(() => undefined)]);
    requests.push(
      r
        ? { kind: c.kind, ended: r.at - killedAt, outcome: r.outcome }
        : { kind: c.kind, ended: NaN, outcome: "still open 30 s after the kill" },
    );
  }
  return requests;
}

/**
 * What was gathered after the kill: its time, when each survivor last heard the victim, what the
 * poll saw, and how the open requests ended.
 */
interface AfterKill {
  killedAt: number;
  heardAt: ReadonlyMap<string, number>;
  polled: Polled;
  requests: ChatOutcome[];
}

/** The run's sample: the poll's figures, and the steps from the deciding survivor's log lines. */
function fromLogs(
  cluster: HostCluster,
  kind: Kind,
  roles: Roles,
  { killedAt, heardAt, polled, requests }: AfterKill,
): Sample {
  const { survivors } = roles;
  const { session, gone, last } = polled;
  // The deciding survivor: the new master (master kills) or the master (worker kills, cuts).
  const deciderName = last.find(isMaster)?.this_node.name ?? survivors[0]!.spec.name;
  const decider = cluster.node(deciderName);
  const other = survivors.find((n) => n !== decider)!;
  const newSession = last[0]!.session!.session_id;
  const rel = (t: number | undefined) => (t === undefined ? undefined : t - killedAt);
  const heard = heardAt.get(deciderName);
  const out: Sample = { gone, silentAtKill: heard === undefined ? NaN : killedAt - heard };
  if (requests.length) out.requests = requests;
  const detected = rel(
    logged(decider, killedAt, (l) => {
      if (l.msg?.startsWith("peer gone") !== true) return false;
      out.probes = (l.probes ?? []).map((p) => p.replace(/^.*: /, ""));
      return true;
    }),
  );
  if (detected !== undefined) out.detected = detected;
  let reason: string | undefined;
  const lost = rel(
    logged(decider, killedAt, (l) => {
      const m = /^node lost \((.+)\)$/.exec(l.msg ?? "");
      if (m) reason = m[1];
      return m !== null;
    }),
  );
  if (lost !== undefined) out.lost = lost;
  if (kind === "master") {
    out.session = session!;
    const elected = rel(
      logged(decider, killedAt, (l) => l.msg === "elected master; starting session"),
    );
    const adopted = rel(
      logged(other, killedAt, (l) => l.msg === "session changed" && l.session === newSession),
    );
    if (elected !== undefined) out.elected = elected;
    if (adopted !== undefined) out.adopted = adopted;
    reason =
      detected !== undefined && detected <= (elected ?? Infinity)
        ? "connection lost"
        : "election timeout";
  }
  if (reason !== undefined) out.reason = reason;
  return out;
}

/** One kill (or cut) run on a fresh cluster; `store` is node-1's store for worker kills. */
export async function once(
  kind: Kind,
  delayMs: number,
  store: string,
  modelId: string,
): Promise<Sample> {
  await using cluster = await startHostCluster(3, {
    // Info level: the election's log lines time the decision and its arrival on the other survivor.
    // node-1 is the store host (worker kills place the model's only instance on the victim).
    config: (i) => ({
      cluster: TIMINGS,
      logging: { level: "info" },
      ...(i === 0 && kind === "worker" ? { store_path: store } : {}),
    }),
    ...(delayMs ? { routeDelayMs: delayMs } : {}),
  });
  const roles = await prepare(cluster, kind, delayMs, modelId);
  // Kill at a random point of the heartbeat cycle. Wall-clock ms throughout: the nodes' log lines
  // and last_heard_ms_ago come from the same clock (one kernel, many namespaces).
  await sleep(1000 + Math.random() * TIMINGS.heartbeat_ms);
  const chats = kind === "worker" ? await openChats(cluster, modelId) : [];
  const killedAt = Date.now();
  if (kind === "cut") {
    for (const s of roles.survivors) await cluster.lab.cutPair(roles.victimName, s.spec.name);
  } else roles.victim.kill("SIGKILL");
  const heardAt = await lastHeard(roles.survivors, roles.victimName);
  const polled = await untilGone(kind, roles, killedAt);
  const requests = await requestOutcomes(chats, killedAt);
  await sleep(300); // the survivors' last log lines are still in their pipes
  return fromLogs(cluster, kind, roles, { killedAt, heardAt, polled, requests });
}
