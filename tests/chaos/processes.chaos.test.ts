// Chaos: kill -9 each kind of process of a real 3-host cluster while streaming and non-streaming
// requests are in flight through the official OpenAI client. Every open request must end with its
// documented typed error within 6 s (or complete), nothing may be left over (processes and ports per
// host, this process's descriptors, compared with a census taken before), the cluster converges
// again, and what the operator committed (deployments, registered models) survives.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  countByName,
  deleteEveryInstance,
  namespaceListeners,
  namespaceProcesses,
  openFdCount,
  placeAndWait,
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { HostCluster, NodeProcess } from "@ic/testkit";

interface StateDoc {
  session: { session_id: string } | null;
  node_identities: { node_id: string; name: string; is_master: boolean }[];
  models: { model_id: string }[];
  deployments: { deployment_id: string; model_id: string; instance_id: string }[];
  instances: {
    instance_id: string;
    model_id: string;
    assignments: { node_id: string; rank: number }[];
    runners: { rank: number; state: string; restarts: number }[];
  }[];
}

/** The documented end of a request whose instance, worker or master was lost (docs/api.md). */
const LOSS_CODES = ["instance_lost", "task_failed", "session_changed", "upstream_timeout"];
const BOUND_MS = 6000;

interface Outcome {
  readonly kind: "stream" | "plain";
  readonly ok: boolean;
  readonly code?: string | undefined;
  readonly status?: number | undefined;
  readonly retryable?: boolean | undefined;
  readonly error?: string | undefined;
  readonly endedAt: number;
}

/**
 * Opens `n` streaming and `n` non-streaming requests through `node`'s gateway and resolves once every
 * stream has its first chunk (the non-streaming ones are then generating too). `ended` has each
 * request's outcome.
 */
async function inflight(node: NodeProcess, model: string, n: number, maxTokens = 2000) {
  const client = new OpenAI({
    baseURL: `${node.apiUrl}/v1`,
    apiKey: node.spec.apiToken!,
    maxRetries: 0,
    timeout: 60_000,
  });
  const body = {
    model,
    messages: [{ role: "user" as const, content: "Write a very long story about the sea." }],
    // Each of the engine's 4 slots has 4096 tokens (see the engine config below): 2000 outlasts a
    // master failover and never exhausts the KV cache (that would be a 502).
    max_tokens: maxTokens,
  };
  const classify = (kind: Outcome["kind"], e: unknown): Outcome => {
    if (e instanceof OpenAI.APIError) {
      const err = e.error as { code?: string; retryable?: boolean } | undefined;
      return {
        kind,
        ok: false,
        code: err?.code,
        status: e.status,
        retryable: err?.retryable,
        error: e.message,
        endedAt: Date.now(),
      };
    }
    return { kind, ok: false, error: String(e), endedAt: Date.now() };
  };
  const firsts: Promise<void>[] = [];
  const ended: Promise<Outcome>[] = [];
  for (let i = 0; i < n; i++) {
    let first!: () => void;
    firsts.push(new Promise<void>((r) => (first = r)));
    ended.push(
      (async (): Promise<Outcome> => {
        try {
          const stream = await client.chat.completions.create({ ...body, stream: true });
          for await (const _ of stream) first();
          return { kind: "stream", ok: true, endedAt: Date.now() };
        } catch (e) {
          first();
          return classify("stream", e);
        }
      })(),
    );
    ended.push(
      client.chat.completions.create(body).then(
        (): Outcome => ({ kind: "plain", ok: true, endedAt: Date.now() }),
        (e: unknown) => classify("plain", e),
      ),
    );
  }
  await Promise.all(firsts);
  // The plain requests are in flight too only once their tasks exist (a kill before a request's task
  // is created fails it differently: no_master, the bus gone before it was ever sequenced).
  await waitFor(
    async () =>
      (await node.get<{ this_node: { tasks_open: number } }>("/state")).this_node.tasks_open >=
      2 * n
        ? true
        : undefined,
    { timeoutMs: 10_000, intervalMs: 20, what: `${2 * n} tasks in flight` },
  );
  return { ended: Promise.all(ended) };
}

/** Every request ended within the bound after `killedAt`, each with a typed, retryable loss error. */
function expectTypedLoss(outcomes: Outcome[], killedAt: number, codes = LOSS_CODES) {
  for (const o of outcomes) {
    expect(o.ok, `${o.kind} should have failed: ${JSON.stringify(o)}`).toBe(false);
    expect(codes, JSON.stringify(o)).toContain(o.code);
    expect(o.retryable, JSON.stringify(o)).toBe(true);
    if (o.kind === "plain") expect([500, 503, 504]).toContain(o.status);
    expect(o.endedAt - killedAt, JSON.stringify(o)).toBeLessThan(BOUND_MS);
  }
}

interface Census {
  readonly procs: Record<string, Record<string, number>>;
  readonly listeners: Record<string, number>;
  readonly fds: number;
}

function census(cluster: HostCluster): Census {
  const procs: Record<string, Record<string, number>> = {};
  const listeners: Record<string, number> = {};
  for (const h of cluster.lab.hosts) {
    procs[h.name] = countByName(namespaceProcesses(h.ns));
    listeners[h.name] = namespaceListeners(h.ns).length;
  }
  return { procs, listeners, fds: openFdCount() };
}

/** Waits until the census matches `base` again (processes and ports per host; descriptors ±4). */
async function expectCensus(cluster: HostCluster, base: Census, what: string) {
  let last: Census | undefined;
  try {
    await waitFor(
      async () => {
        last = census(cluster);
        const same =
          JSON.stringify(last.procs) === JSON.stringify(base.procs) &&
          JSON.stringify(last.listeners) === JSON.stringify(base.listeners) &&
          Math.abs(last.fds - base.fds) <= 4;
        return same ? true : undefined;
      },
      { timeoutMs: 20_000, intervalMs: 250, what },
    );
  } catch {
    expect(last, what).toEqual(base);
  }
}

const ids = (doc: StateDoc, ...names: string[]) =>
  names.map((n) => doc.node_identities.find((x) => x.name === n)!.node_id);

/** Processes whose argv mentions the node's data dir (its runners' model paths) or lab address. */
function enginesOf(cluster: HostCluster, host: string, bin: "llama-server" | "ggml-rpc-server") {
  const ns = cluster.lab.host(host).ns;
  return namespaceProcesses(ns).filter((p) => p.name === bin);
}

/** Deployments and models as the operator committed them (ids and model ids, sorted). */
function committed(doc: StateDoc) {
  return {
    models: doc.models.map((m) => m.model_id).sort(),
    deployments: doc.deployments.map((d) => `${d.deployment_id}:${d.model_id}`).sort(),
  };
}

async function readyEverywhere(cluster: HostCluster, modelId: string, timeoutMs = 45_000) {
  return waitFor(
    async () => {
      const docs = await Promise.all(
        cluster.nodes.filter((n) => n.running).map((n) => n.get<StateDoc>("/state")),
      );
      const ok = docs.every((d) =>
        d.instances.some(
          (i) =>
            i.model_id === modelId &&
            i.runners.length === i.assignments.length &&
            i.runners.every((r) => r.state === "RunnerReady"),
        ),
      );
      return ok ? docs[0] : undefined;
    },
    { timeoutMs, intervalMs: 200, what: `${modelId} ready on every node` },
  );
}

describe("chaos: kill -9 under load on 3 hosts", () => {
  let cluster: HostCluster;
  let model: string;
  let n1: NodeProcess, n2: NodeProcess, n3: NodeProcess;
  let base: Census;

  beforeAll(async () => {
    const seeded = await seedStore(mkdtempSync(join(tmpdir(), "ic-chaos-store-")), {
      modelId: "chaos/slow",
      slow: true,
    });
    model = seeded.modelId;
    // Defaults for every timing (heartbeat 2 s, liveness 4 s, election 3 s): the bound is the spec's.
    cluster = await startHostCluster(3, {
      config: (i) => ({
        engine: { context_size: 16384, extra_args: ["-np", "4"] },
        ...(i === 0 ? { store_path: seeded.store } : {}),
      }),
    });
    [n1, n2, n3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    await waitForConvergence(cluster.nodes, 3);
    base = census(cluster);
  }, 120_000);

  afterAll(async () => {
    await cluster?.[Symbol.asyncDispose]();
  });

  /** Places the model on the named hosts only; returns the instance and the committed state. */
  async function placeOn(hosts: string[]) {
    const doc = await n1.get<StateDoc>("/state");
    const others = ["node-1", "node-2", "node-3"].filter((h) => !hosts.includes(h));
    const inst = await placeAndWait(n1, {
      model_id: model,
      min_nodes: hosts.length,
      excluded_nodes: ids(doc, ...others),
    });
    const ready = await readyEverywhere(cluster, model);
    return { inst, before: committed(ready) };
  }

  /** Every instance and deployment deleted as a client would, then nothing left over. */
  async function clear(what: string) {
    await deleteEveryInstance(n1);
    await expectCensus(cluster, base, `clean after ${what}`);
  }

  it("a runner (rank 0's llama-server): open requests end with instance_lost at once; it restarts", async () => {
    const { inst, before } = await placeOn(["node-3"]);
    const [engine] = enginesOf(cluster, "node-3", "llama-server");
    expect(engine).toBeDefined();
    const load = await inflight(n1, model, 2);
    const killedAt = Date.now();
    process.kill(engine!.pid, "SIGKILL");
    expectTypedLoss(await load.ended, killedAt, ["instance_lost"]);
    const doc = await waitFor(
      async () => {
        const d = await n1.get<StateDoc>("/state");
        const i = d.instances.find((x) => x.instance_id === inst.instance_id);
        return i?.runners[0]?.state === "RunnerReady" && i.runners[0].restarts >= 1 ? d : undefined;
      },
      { timeoutMs: 30_000, what: "runner restarted and ready" },
    );
    expect(committed(doc)).toEqual(before);
    expect(enginesOf(cluster, "node-3", "llama-server")).toHaveLength(1);
    await clear("runner kill");
  });

  it("a runner of one of two instances: the non-streaming requests on it are answered by the other (retry before the first byte)", async () => {
    try {
      const on2 = await placeOn(["node-2"]);
      const on3 = await placeOn(["node-3"]);
      const retried = async () => {
        const text = await (
          await fetch(`${n1.apiUrl}/metrics`, { headers: n1.authHeaders })
        ).text();
        return text
          .split("\n")
          .filter((l) => l.startsWith("ic_chat_retries_total{"))
          .reduce((sum, l) => sum + Number(l.split(" ").at(-1)), 0);
      };
      const before = await retried();
      // Four non-streaming requests from one gateway: identical, so prefix routing keeps them on one
      // instance within its load bound (least-outstanding would put two on each). The engine killed
      // is the one of the instance holding the most of them.
      const plain = Array.from({ length: 4 }, () =>
        fetch(`${n1.apiUrl}/v1/chat/completions`, {
          method: "POST",
          headers: { ...n1.authHeaders, "content-type": "application/json" },
          body: JSON.stringify({
            model,
            messages: [{ role: "user", content: "Write a very long story about the sea." }],
            // Long enough that the kill lands mid-generation (it follows the fourth task by one
            // state read); each request is then generated again in full on the other instance.
            max_tokens: 200,
          }),
        }).then(async (r) => ({ status: r.status, text: (await r.text()).slice(0, 300) })),
      );
      await waitFor(
        async () =>
          (await n1.get<{ this_node: { tasks_open: number } }>("/state")).this_node.tasks_open >= 4
            ? true
            : undefined,
        { timeoutMs: 10_000, intervalMs: 20, what: "4 tasks in flight" },
      );
      const held = (
        await n1.get<{ instances: { instance_id: string; outstanding?: number }[] }>("/state")
      ).instances;
      const load = (id: string) => held.find((i) => i.instance_id === id)?.outstanding ?? 0;
      const host = load(on2.inst.instance_id) > load(on3.inst.instance_id) ? "node-2" : "node-3";
      expect(
        Math.max(load(on2.inst.instance_id), load(on3.inst.instance_id)),
      ).toBeGreaterThanOrEqual(2);
      const [engine] = enginesOf(cluster, host, "llama-server");
      expect(engine).toBeDefined();
      process.kill(engine!.pid, "SIGKILL");
      const outcomes = await Promise.all(plain);
      expect(
        outcomes.map((o) => o.status),
        JSON.stringify(outcomes),
      ).toEqual([200, 200, 200, 200]);
      expect(await retried()).toBeGreaterThanOrEqual(before + 2);
    } finally {
      await clear("one of two instances");
    }
  });

  it("an rpc rank (ggml-rpc-server of a Pipeline): open requests end typed; the instance serves again", async () => {
    const { inst, before } = await placeOn(["node-2", "node-3"]);
    const doc0 = await n1.get<StateDoc>("/state");
    const i0 = doc0.instances.find((x) => x.instance_id === inst.instance_id)!;
    const rank1Host = doc0.node_identities.find(
      (n) => n.node_id === i0.assignments.find((a) => a.rank === 1)!.node_id,
    )!.name;
    const [rpc] = enginesOf(cluster, rank1Host, "ggml-rpc-server");
    expect(rpc).toBeDefined();
    const load = await inflight(n1, model, 2);
    const killedAt = Date.now();
    process.kill(rpc!.pid, "SIGKILL");
    expectTypedLoss(await load.ended, killedAt);
    const doc = await readyEverywhere(cluster, model);
    expect(committed(doc)).toEqual(before);
    await clear("rpc rank kill");
  });

  for (const how of ["node process", "process group"] as const) {
    it(`a worker's ${how}: its engines die with it, open requests end typed within 6 s, it rejoins`, async () => {
      const { before } = await placeOn(["node-3"]);
      const load = await inflight(n2, model, 2);
      const killedAt = Date.now();
      if (how === "node process") n3.killProcess("SIGKILL");
      else n3.kill("SIGKILL");
      expectTypedLoss(await load.ended, killedAt);
      // No orphan: the namespace of node-3 is empty (engines and nats-server went with the node).
      await waitFor(
        async () =>
          namespaceProcesses(cluster.lab.host("node-3").ns).length === 0 ? true : undefined,
        { timeoutMs: 3000, what: "node-3's children gone with it" },
      );
      await n3.waitExit();
      // The operator's intent holds: the deployment is placed again once node-3 is back.
      await n3.start();
      await waitForConvergence(cluster.nodes, 3, 30_000);
      const doc = await readyEverywhere(cluster, model);
      expect(committed(doc)).toEqual(before);
      await clear(`worker ${how} kill`);
    });
  }

  it("one node's nats-server: it is restarted, the node stays a member, requests end", async () => {
    const { before } = await placeOn(["node-3"]);
    const session = (await n1.get<StateDoc>("/state")).session!.session_id;
    const [nats] = namespaceProcesses(cluster.lab.host("node-2").ns).filter(
      (p) => p.name === "nats-server",
    );
    const load = await inflight(n2, model, 1, 300);
    const killedAt = Date.now();
    process.kill(nats!.pid, "SIGKILL");
    const outcomes = await load.ended;
    for (const o of outcomes) {
      // The engine connection is unaffected: requests finish, or end typed if the bus gap was long.
      if (!o.ok) expect(LOSS_CODES, JSON.stringify(o)).toContain(o.code);
      // 300 tokens generate in a few seconds on an idle machine; the bound leaves room for a slow one.
      expect(o.endedAt - killedAt, JSON.stringify(o)).toBeLessThan(60_000);
    }
    await waitForConvergence(cluster.nodes, 3, 30_000);
    const doc = await n1.get<StateDoc>("/state");
    expect(doc.session!.session_id).toBe(session);
    expect(committed(doc)).toEqual(before);
    await clear("nats-server kill");
  });

  it("the master: requests on other nodes end with session_changed within 6 s; a new master keeps the intent", async () => {
    const { before } = await placeOn(["node-3"]);
    const load = await inflight(n2, model, 2);
    const killedAt = Date.now();
    n1.killProcess("SIGKILL");
    expectTypedLoss(await load.ended, killedAt, ["session_changed", "task_failed"]);
    await waitFor(
      async () =>
        namespaceProcesses(cluster.lab.host("node-1").ns).length === 0 ? true : undefined,
      { timeoutMs: 3000, what: "node-1's children gone with it" },
    );
    await n1.waitExit();
    await n1.start();
    await waitForConvergence(cluster.nodes, 3, 30_000);
    const doc = await readyEverywhere(cluster, model);
    expect(committed(doc)).toEqual(before);
    await clear("master kill");
  });
});
