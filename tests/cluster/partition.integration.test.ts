// Network partitions of a 4-node cluster on lab hosts (one network namespace each; a cut blackholes
// every route between the two sides, both ways; the test process still reaches every node).
// What each side does while cut, as asserted below (FAST timings: election 1.5 s, liveness 2 s).
// Chat has no majority rule: every side elects a master (split-brain) and serves what runs there;
// the heal keeps the session with more live nodes (ties: the most senior master). Intent does have
// one: a placement is written to the intent store (JetStream, replicated on 3 of the 4 nodes) before
// it is answered, so only the side holding a quorum of it can place; the other answers 503
// no_quorum, and nothing a client was told succeeded is lost at the heal. docs/partitions.md.
//
// | cut off alone         | majority side (3 nodes)                    | minority side (1 node)                      |
// |-----------------------|--------------------------------------------|---------------------------------------------|
// | node-4 (non-master)   | keeps session S1 under node-1; node-4 is   | after 1.5 s starts its own session S4 as    |
// |                       | removed after 2 s with its instances       | master; the others leave S4 after 2 s       |
// | node-1 (the master)   | after 1.5 s node-2 (most senior left)      | node-1 stays master of S1; removes the      |
// |                       | starts S2; node-1 removed after 2 s        | others (and their instances) after 2 s      |
// | chat                  | 200 for models with an instance on the     | 200 for models with an instance on the      |
// |                       | majority; the rest stay deployed: re-placed| minority node; the rest likewise: here      |
// |                       | here if exclusions allow, else Pending:    | Pending (exclusions): 404 model_not_ready   |
// |                       | 404 model_not_ready (retryable)            |                                             |
// | open streams          | through a node that changes session (all   | node-4: ends with session_changed at the    |
// |                       | 3 when the master was cut): SSE error      | cut; node-1 (kept its session): streams go  |
// |                       | session_changed at the cut; to an engine   | on until the heal                           |
// |                       | on the cut node-4: task_failed after 2 s   |                                             |
// | place                 | 200, on majority nodes only                | 503 no_quorum (retryable): nothing placed   |
// | commands in the 1.5 s | a node whose master is cut off: 503        | node-4: 503 session_changed / no_master     |
// | election window       | session_changed / no_master                |                                             |
// | at the heal           | keeps its session (3 live nodes > 1): each | adopts the majority's session: its streams  |
// |                       | instance with all ranks on the majority    | end with session_changed; every instance on |
// |                       | survives (placed before or while cut) and  | the minority node is stopped (there before  |
// |                       | serves through all 4 nodes; its Pending    | the cut); the majority places its Pending   |
// |                       | deployments are placed on the returning    | deployments here anew; every placement the  |
// |                       | node anew                                  | majority acknowledged is kept               |
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from "vitest";
import {
  deleteEveryInstance,
  placeAndWait,
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { HostCluster, NodeProcess } from "@ic/testkit";

const TINY = "test/tiny-llama";
const SLOW = "test/slow-llama";
const ALL = ["node-1", "node-2", "node-3", "node-4"] as const;
type Host = (typeof ALL)[number];

interface StateDoc {
  session: { session_id: string; master_peer_key: string } | null;
  this_node: { node_id: string | null; name: string; is_master: boolean; synced: boolean };
  node_identities: { node_id: string; name: string; is_master: boolean }[];
  instances: {
    instance_id: string;
    model_id: string;
    assignments: { node_id: string; rank: number }[];
    runners: { rank: number; state: string }[];
  }[];
}

interface ErrorBody {
  error: { code: string; message: string };
}

const t0 = Date.now();
/** A timeline of what the test saw, printed on the test's stderr (useful when a run fails). */
function note(msg: string): void {
  process.stderr.write(`[partition +${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}\n`);
}

const state = (n: NodeProcess) => n.get<StateDoc>("/state");
const idOf = (doc: StateDoc, name: string) =>
  doc.node_identities.find((n) => n.name === name)!.node_id;

/** Four lab hosts; node-1 is the store host of the tiny and the slow model. */
async function startLab(): Promise<HostCluster> {
  const store = mkdtempSync(join(tmpdir(), "ic-store-"));
  await seedStore(store, { modelId: TINY });
  await seedStore(store, { modelId: SLOW, slow: true });
  // One engine thread and a 32768-token context (8192 for each of the engine's 4 slots): a slow-model
  // stream of 8000 tokens stays open far longer than a cut, an election and a heal take.
  return startHostCluster(4, {
    config: (i) => ({
      ...(i === 0 ? { store_path: store } : {}),
      engine: { context_size: 32768, extra_args: ["-t", "1"] },
    }),
  });
}

/** All four in one session, node-1 (started first, so the most senior) its master. */
async function converged(cluster: HostCluster): Promise<StateDoc[]> {
  onTestFailed(() => {
    for (const n of cluster.nodes)
      process.stderr.write(
        `--- ${n.spec.name} log tail ---\n${n.logLines.slice(-60).join("\n")}\n`,
      );
  });
  const docs = (await waitForConvergence(cluster.nodes, 4, 60_000)) as unknown as StateDoc[];
  expect(docs[0]!.node_identities.find((n) => n.is_master)?.name).toBe("node-1");
  return docs;
}

/** Places a 1-node instance of `model` on `target` (every other node excluded); waits until all see it ready. */
async function placeOn(
  cluster: HostCluster,
  via: NodeProcess,
  target: Host,
  model: string,
): Promise<string> {
  const doc = await state(via);
  const excluded = doc.node_identities.filter((n) => n.name !== target).map((n) => n.node_id);
  const inst = await placeAndWait(
    via,
    { model_id: model, min_nodes: 1, excluded_nodes: excluded },
    180_000,
  );
  expect(inst.assignments.map((a) => a.node_id)).toEqual([idOf(doc, target)]);
  await waitFor(
    async () => {
      const docs = await Promise.all(cluster.nodes.map(state));
      return docs.every((d) =>
        d.instances
          .find((i) => i.instance_id === inst.instance_id)
          ?.runners.some((r) => r.rank === 0 && r.state === "RunnerReady"),
      )
        ? true
        : undefined;
    },
    { timeoutMs: 30_000, what: `instance of ${model} ready on every node` },
  );
  note(`placed ${model} on ${target}: ${inst.instance_id}`);
  return inst.instance_id;
}

/** A non-streaming 2-token chat; status and error code (0 / "timeout" when no answer came in 30 s). */
async function chat(node: NodeProcess, model: string): Promise<{ status: number; code?: string }> {
  try {
    const r = await fetch(`${node.apiUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", ...node.authHeaders },
      body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
      signal: AbortSignal.timeout(30_000),
    });
    const body = (await r.json()) as Partial<ErrorBody>;
    return r.status === 200 ? { status: 200 } : { status: r.status, code: body.error?.code };
  } catch (e) {
    return { status: 0, code: (e as Error).name === "TimeoutError" ? "timeout" : String(e) };
  }
}

/** POST /place_instance of a 1-node instance on `target`; the answer (never waits for readiness). */
async function place(
  via: NodeProcess,
  target: Host,
  model: string,
): Promise<{ status: number; code?: string; instanceId?: string; on?: string }> {
  const doc = await state(via);
  const excluded = doc.node_identities.filter((n) => n.name !== target).map((n) => n.node_id);
  const r = await fetch(`${via.apiUrl}/place_instance`, {
    method: "POST",
    headers: { "content-type": "application/json", ...via.authHeaders },
    body: JSON.stringify({ model_id: model, min_nodes: 1, excluded_nodes: excluded }),
    signal: AbortSignal.timeout(60_000),
  });
  const body = (await r.json()) as Partial<ErrorBody> & {
    instance?: { instance_id: string; assignments: { node_id: string }[] };
  };
  if (r.status !== 200) return { status: r.status, code: body.error?.code };
  const nodeId = body.instance!.assignments[0]!.node_id;
  return {
    status: 200,
    instanceId: body.instance!.instance_id,
    on: doc.node_identities.find((n) => n.node_id === nodeId)?.name,
  };
}

/**
 * `place` as a client does on the side that has the intent store's quorum: a `no_quorum` answer is
 * retryable, and right after a cut that took a store replica away JetStream may still be electing
 * the bucket's new leader among the others (seconds; longer on a loaded machine). At most 30 s.
 */
async function placeWithQuorum(via: NodeProcess, target: Host, model: string) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const r = await place(via, target, model);
    if (r.code !== "no_quorum" || Date.now() > deadline) return r;
    note(`place through ${via.spec.name}: no_quorum yet, again`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

interface StreamEnd {
  status: number;
  chunks: number;
  done: boolean;
  error?: { code: string; message: string };
}

/**
 * Opens a long streaming chat (8000 tokens, EOS ignored) through `node`; `first` resolves with the
 * first content chunk, `end` with how the stream ended: `[DONE]`, an SSE error event, or neither.
 */
async function openStream(
  node: NodeProcess,
  model: string,
): Promise<{ first: Promise<void>; end: Promise<StreamEnd>; abort: () => void }> {
  const ctl = new AbortController();
  const res = await fetch(`${node.apiUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...node.authHeaders },
    body: JSON.stringify({
      model,
      messages: [{ role: "user", content: "Write a very long story" }],
      max_tokens: 8000,
      ignore_eos: true,
      stream: true,
    }),
    signal: AbortSignal.any([ctl.signal, AbortSignal.timeout(300_000)]),
  });
  let gotFirst!: () => void;
  let noFirst!: (e: Error) => void;
  const first = new Promise<void>((resolve, reject) => {
    gotFirst = resolve;
    noFirst = reject;
  });
  first.catch(() => {});
  const end = (async (): Promise<StreamEnd> => {
    const out: StreamEnd = { status: res.status, chunks: 0, done: false };
    if (res.status !== 200) {
      out.error = ((await res.json()) as ErrorBody).error;
      return out;
    }
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") out.done = true;
          else {
            const msg = JSON.parse(data) as Partial<ErrorBody>;
            if (msg.error) out.error = msg.error;
            else if (++out.chunks === 1) gotFirst();
          }
        }
      }
    } catch (e) {
      out.error ??= { code: "client_read_failed", message: String(e) };
    }
    return out;
  })().finally(() => noFirst(new Error("stream ended before its first chunk")));
  return { first, end, abort: () => ctl.abort() };
}

/** Waits until a 2-token chat of `model` answers 200 through every node (re-placed instances start). */
async function servesEverywhere(cluster: HostCluster, model: string): Promise<void> {
  let last: { status: number; code?: string }[] = [];
  await waitFor(
    async () => {
      last = await Promise.all(cluster.nodes.map((n) => chat(n, model)));
      // While it is placed again and warms up, the answer is the retryable 404.
      for (const r of last)
        if (r.status !== 200) expect(r).toEqual({ status: 404, code: "model_not_ready" });
      return last.every((r) => r.status === 200) ? true : undefined;
    },
    { timeoutMs: 180_000, intervalMs: 1000, what: `${model} serving again through every node` },
  );
  note(`${model} serves again through every node`);
}

async function cut(cluster: HostCluster, side: readonly Host[]): Promise<void> {
  for (const a of side) for (const b of ALL) if (!side.includes(b)) await cluster.lab.cutPair(a, b);
  note(`cut ${side.join(",")} off from the rest`);
}

async function heal(cluster: HostCluster, side: readonly Host[]): Promise<void> {
  for (const a of side)
    for (const b of ALL) if (!side.includes(b)) await cluster.lab.healPair(a, b);
  note(`healed ${side.join(",")}`);
}

/** Waits until `nodes` (one side of the cut) share one session whose members are exactly `members`. */
async function waitSideSession(
  nodes: readonly NodeProcess[],
  members: readonly Host[],
  what: string,
): Promise<StateDoc[]> {
  const docs = (await waitForConvergence(nodes, members.length, 30_000)) as unknown as StateDoc[];
  for (const d of docs)
    expect(d.node_identities.map((n) => n.name).sort()).toEqual([...members].sort());
  note(
    `${what}: session ${docs[0]!.session!.session_id} master ${docs[0]!.node_identities.find((n) => n.is_master)?.name}`,
  );
  return docs;
}

/** The heal properties every node's /state must show. */
function expectHealed(
  docs: StateDoc[],
  o: { session: string; master: Host; kept: string[]; gone: string[] },
): void {
  for (const d of docs) {
    expect(d.session?.session_id).toBe(o.session);
    expect(d.this_node.synced).toBe(true);
    expect(d.node_identities.map((n) => n.name).sort()).toEqual([...ALL]);
    expect(d.node_identities.filter((n) => n.is_master).map((n) => n.name)).toEqual([o.master]);
    const nodeIds = d.node_identities.map((n) => n.node_id);
    expect(new Set(nodeIds).size).toBe(nodeIds.length);
    const instanceIds = d.instances.map((i) => i.instance_id);
    expect(new Set(instanceIds).size).toBe(instanceIds.length);
    for (const id of o.kept) expect(instanceIds).toContain(id);
    for (const id of o.gone) expect(instanceIds).not.toContain(id);
    // Every assignment names a member of the session.
    for (const i of d.instances)
      for (const a of i.assignments) expect(nodeIds).toContain(a.node_id);
  }
}

/** Every placement acknowledged before or during the cut is still a deployment on every node. */
async function expectDeploymentsKept(cluster: HostCluster, instances: string[]): Promise<void> {
  const docs = await Promise.all(
    cluster.nodes.map((n) => n.get<{ deployments: { instance_id: string }[] }>("/state")),
  );
  for (const d of docs)
    for (const id of instances) expect(d.deployments.map((x) => x.instance_id)).toContain(id);
}

/**
 * Back to the lab as startLab left it: every link up, one session, no instance and no deployment
 * on any node (deleted as a client would, again until none is left).
 */
async function reset(cluster: HostCluster): Promise<void> {
  for (const a of ALL) for (const b of ALL) if (a < b) await cluster.lab.healPair(a, b);
  await deleteEveryInstance(cluster.nodes[0]!, cluster.nodes, 60_000);
  note("reset: every link up, no instance");
}

describe("network partitions of a 4-node cluster", () => {
  // One lab for both scenarios: a 4-host lab takes 25-40 s to start on a loaded machine. The first
  // ends healed in one session under node-1, where the second starts once its instances are gone.
  let cluster: HostCluster;
  beforeAll(async () => {
    cluster = await startLab();
  }, 180_000);
  afterAll(async () => {
    await cluster?.[Symbol.asyncDispose]();
  });

  it("a non-master cut off alone elects itself; at the heal it rejoins the majority's session", async () => {
    const docs = await converged(cluster);
    const [n1, n2, n3, n4] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess, NodeProcess];
    const s1 = docs[0]!.session!.session_id;
    const tiny = await placeOn(cluster, n1, "node-2", TINY); // majority side
    const slow = await placeOn(cluster, n1, "node-4", SLOW); // the node that will be cut off

    // Open when the cut comes: a stream through node-4 from its own engine, and one through node-2
    // from node-4's engine.
    const atCut = await openStream(n4, SLOW);
    const toCutEngine = await openStream(n2, SLOW);
    await atCut.first;
    await toCutEngine.first;
    await cut(cluster, ["node-4"]);
    // In the election window node-4's commands reach no master.
    const windowPlace = place(n4, "node-4", SLOW);

    // node-4 hears no master for the election timeout and starts its own session: split-brain.
    const ended = await atCut.end;
    note(`stream through node-4 at the cut: ${JSON.stringify(ended)}`);
    expect(ended.error?.code).toBe("session_changed");
    // The majority's master removes node-4 after the liveness timeout: the task on it fails.
    const lostEngine = await toCutEngine.end;
    note(`stream through node-2 from node-4's engine: ${JSON.stringify(lostEngine)}`);
    expect(lostEngine.error?.code).toBe("task_failed");
    const [minority] = await waitSideSession([n4], ["node-4"], "minority");
    expect(minority!.session!.session_id).not.toBe(s1);
    expect(minority!.this_node.is_master).toBe(true);
    const majority = await waitSideSession(
      [n1, n2, n3],
      ["node-1", "node-2", "node-3"],
      "majority",
    );
    expect(majority[0]!.session!.session_id).toBe(s1);
    expect(majority[0]!.node_identities.find((n) => n.is_master)?.name).toBe("node-1");
    const w = await windowPlace;
    note(`place through node-4 in the election window: ${JSON.stringify(w)}`);
    expect(w.status).toBe(503);
    expect(["no_master", "session_changed"]).toContain(w.code);

    // While cut: each side serves what runs on its own side. The rest is still deployed (intent), but
    // its exclusions leave no node on this side, so it stays Pending: 404 model_not_ready, retryable.
    for (const n of [n1, n2, n3]) {
      expect(await chat(n, TINY)).toEqual({ status: 200 });
      expect(await chat(n, SLOW)).toEqual({ status: 404, code: "model_not_ready" });
    }
    expect(await chat(n4, SLOW)).toEqual({ status: 200 });
    expect(await chat(n4, TINY)).toEqual({ status: 404, code: "model_not_ready" });
    // Only the side with a quorum of the intent store places; the other refuses, retryable.
    const placedMajority = await placeWithQuorum(n3, "node-2", TINY);
    const placedMinority = await place(n4, "node-4", SLOW);
    note(
      `placed while cut: majority ${JSON.stringify(placedMajority)}, minority ${JSON.stringify(placedMinority)}`,
    );
    expect(placedMajority).toMatchObject({ status: 200, on: "node-2" });
    expect(placedMinority).toMatchObject({ status: 503, code: "no_quorum" });

    // A stream through node-4 is open when the heal comes.
    const atHeal = await openStream(n4, SLOW);
    await atHeal.first;
    const healedAt = Date.now();
    await heal(cluster, ["node-4"]);
    const endedAtHeal = await atHeal.end;
    note(`stream through node-4 at the heal: ${JSON.stringify(endedAtHeal)}`);
    expect(endedAtHeal.error?.code).toBe("session_changed");
    const after = (await waitForConvergence(cluster.nodes, 4, 120_000)) as unknown as StateDoc[];
    note(
      `one session on all 4 nodes ${((Date.now() - healedAt) / 1000).toFixed(1)} s after the heal`,
    );
    expectHealed(after, {
      session: s1,
      master: "node-1",
      kept: [tiny, placedMajority.instanceId!],
      gone: [slow],
    });
    await expectDeploymentsKept(cluster, [tiny, placedMajority.instanceId!]);
    // The winning session still holds the lost instance's deployment: the returning node is a
    // candidate again, so it is placed there anew and serves through every node, with no operator.
    for (const n of cluster.nodes) expect(await chat(n, TINY)).toEqual({ status: 200 });
    await servesEverywhere(cluster, SLOW);
  }, 900_000);

  it("the master cut off alone keeps its session; the majority elects a new one, which wins the heal", async () => {
    await reset(cluster);
    const docs = await converged(cluster);
    const [n1, n2, n3, n4] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess, NodeProcess];
    const s1 = docs[0]!.session!.session_id;
    const tiny = await placeOn(cluster, n1, "node-2", TINY); // majority side
    const slow = await placeOn(cluster, n1, "node-1", SLOW); // the master that will be cut off

    // Open at the cut: a stream through node-3 from node-1's engine, and one through node-1 itself.
    const viaMajority = await openStream(n3, SLOW);
    const viaMaster = await openStream(n1, SLOW);
    await viaMajority.first;
    await viaMaster.first;
    await cut(cluster, ["node-1"]);
    const windowPlace = place(n3, "node-2", TINY);

    const ended = await viaMajority.end;
    note(`stream through node-3 at the cut: ${JSON.stringify(ended)}`);
    expect(ended.error?.code).toBe("session_changed");
    const majority = await waitSideSession(
      [n2, n3, n4],
      ["node-2", "node-3", "node-4"],
      "majority",
    );
    const s2 = majority[0]!.session!.session_id;
    expect(s2).not.toBe(s1);
    expect(majority[0]!.node_identities.find((n) => n.is_master)?.name).toBe("node-2");
    const [minority] = await waitSideSession([n1], ["node-1"], "minority");
    expect(minority!.session!.session_id).toBe(s1);
    expect(minority!.this_node.is_master).toBe(true);
    const w = await windowPlace;
    note(`place through node-3 in the election window: ${JSON.stringify(w)}`);
    expect(w.status).toBe(503);
    expect(["no_master", "session_changed"]).toContain(w.code);

    // node-1 never changed session: its own stream is still running (or finished cleanly).
    const masterStream = await Promise.race([
      viaMaster.end,
      new Promise<"open">((r) => setTimeout(() => r("open"), 100)),
    ]);
    note(`stream through node-1 during the cut: ${JSON.stringify(masterStream)}`);
    if (masterStream !== "open") expect(masterStream).toMatchObject({ done: true });
    expect(masterStream === "open" || masterStream.error === undefined).toBe(true);
    // Its engine shares one KV cache among its slots: end it before the next long stream.
    viaMaster.abort();

    for (const n of [n2, n3, n4]) {
      expect(await chat(n, TINY)).toEqual({ status: 200 });
      expect(await chat(n, SLOW)).toEqual({ status: 404, code: "model_not_ready" });
    }
    expect(await chat(n1, SLOW)).toEqual({ status: 200 });
    expect(await chat(n1, TINY)).toEqual({ status: 404, code: "model_not_ready" });
    const placedMajority = await placeWithQuorum(n4, "node-2", TINY);
    const placedMinority = await place(n1, "node-1", SLOW);
    note(
      `placed while cut: majority ${JSON.stringify(placedMajority)}, minority ${JSON.stringify(placedMinority)}`,
    );
    expect(placedMajority).toMatchObject({ status: 200, on: "node-2" });
    expect(placedMinority).toMatchObject({ status: 503, code: "no_quorum" });

    const atHeal = await openStream(n1, SLOW);
    await atHeal.first;
    const healedAt = Date.now();
    await heal(cluster, ["node-1"]);
    const after = (await waitForConvergence(cluster.nodes, 4, 120_000)) as unknown as StateDoc[];
    note(
      `one session on all 4 nodes ${((Date.now() - healedAt) / 1000).toFixed(1)} s after the heal: ${after[0]!.session!.session_id} master ${after[0]!.node_identities.find((n) => n.is_master)?.name}, instances ${after[0]!.instances.map((i) => i.instance_id).join(" ")}`,
    );
    const endedAtHeal = await atHeal.end;
    note(`stream through node-1 at the heal: ${JSON.stringify(endedAtHeal)}`);
    expect(endedAtHeal.error?.code).toBe("session_changed");
    expectHealed(after, {
      session: s2,
      master: "node-2",
      kept: [tiny, placedMajority.instanceId!],
      gone: [slow],
    });
    await expectDeploymentsKept(cluster, [tiny, placedMajority.instanceId!]);
    // The winning session still holds the lost instance's deployment: the returning node is a
    // candidate again, so it is placed there anew and serves through every node, with no operator.
    for (const n of cluster.nodes) expect(await chat(n, TINY)).toEqual({ status: 200 });
    await servesEverywhere(cluster, SLOW);
  }, 900_000);
});
