// Planned maintenance across 3 hosts (network namespaces) with real llama-servers: two replicas of a
// model and four clients behind a health-checking load balancer (testkit's: it sends to nodes whose
// GET /health answers 200 and tries another node only when a connection is refused), streaming and
// non-streaming in turn. Then every node is restarted in turn with SIGTERM, the master included.
// No request fails, the session never changes (the draining master hands it off), and both replicas
// are back after each restart. bench/maintenance measures the same at length, with latencies.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  HealthCheckedBalancer,
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
  waitForReadyInstances,
} from "@ic/testkit";
import type { HostCluster } from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

interface StateDoc {
  session: { session_id: string; master_peer_key: string } | null;
  node_identities: { node_id: string; name: string; is_master: boolean }[];
  instances: { instance_id: string; runners: { rank: number; state: string }[] }[];
}

let cluster: HostCluster;
let modelId: string;

beforeAll(async () => {
  const store = mkdtempSync(join(tmpdir(), "ic-store-"));
  ({ modelId } = await seedStore(store, { modelId: "test/maintenance-slow", slow: true }));
  cluster = await startHostCluster(3, {
    config: (i) => ({
      node: { drain_timeout_ms: 30_000 },
      engine: { context_size: 4096, extra_args: ["-np", "4"] },
      ...(i === 0 ? { store_path: store } : {}),
    }),
  });
  await waitForConvergence(cluster.nodes, 3);
}, 180_000);

afterAll(async () => {
  await cluster?.[Symbol.asyncDispose]();
});

/** Requests answered (or failed) so far, by every client. */
let completed = 0;

/** One client sending request after request (streaming and not, in turn) until `until` resolves. */
async function client(lb: HealthCheckedBalancer, until: Promise<void>) {
  const outcomes: { ok: boolean; stream: boolean; status: number; detail: string }[] = [];
  let done = false;
  void until.then(() => (done = true));
  for (let i = 0; !done; i++) {
    const stream = i % 2 === 0;
    try {
      const r = await lb.post("/v1/chat/completions", {
        model: modelId,
        messages: [{ role: "user", content: "Tell me a story." }],
        max_tokens: 60,
        stream,
      });
      const text = await r.text();
      const ok =
        r.status === 200 && (!stream || (text.includes("[DONE]") && !text.includes('"error"')));
      outcomes.push({ ok, stream, status: r.status, detail: ok ? "" : text.slice(0, 300) });
    } catch (e) {
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      outcomes.push({
        ok: false,
        stream,
        status: 0,
        detail: `${String(e)} (${cause?.code ?? ""} ${cause?.message ?? ""}) at ${new Date().toISOString()}`,
      });
    }
    completed++;
  }
  return outcomes;
}

describe("maintenance", () => {
  it.each([
    {
      to: "process" as const,
      what: "to each node's main process (docker stop, systemd KillMode=mixed)",
    },
    { to: "group" as const, what: "to each node's process group (Ctrl-C, kill -- -PGID, tini -g)" },
  ])(
    "a rolling SIGTERM restart of every node $what, the master included, under load with two replicas: no failed request, one session",
    async ({ to }) => {
      const nodes = cluster.nodes as NodeProcess[];
      // The store host registers its models shortly after joining the session.
      await waitFor(
        async () =>
          (await nodes[0]!.get<{ models: { model_id: string }[] }>("/state")).models.some(
            (m) => m.model_id === modelId,
          )
            ? true
            : undefined,
        { timeoutMs: 30_000, what: "the model registered" },
      );
      // The second run finds the deployment the first one placed (intent is durable).
      const deployed = (await nodes[0]!.get<{ deployments: unknown[] }>("/state")).deployments;
      if (deployed.length === 0) {
        const placed = await nodes[0]!.post("/place_instance", { model_id: modelId, replicas: 2 });
        expect(placed.status).toBe(200);
      }
      const state = (n: NodeProcess) => n.get<StateDoc>("/state");
      const twoReady = (live: readonly NodeProcess[]) =>
        waitForReadyInstances<StateDoc>(live[0]!, 2, 90_000);
      const before = await twoReady(nodes);
      const session = before.session!.session_id;

      const lb = new HealthCheckedBalancer(nodes);
      let stopLoad!: () => void;
      const until = new Promise<void>((r) => (stopLoad = r));
      const clients = Array.from({ length: 4 }, () => client(lb, until));
      await new Promise((r) => setTimeout(r, 2000));

      // The master first, then the others; each back (and both replicas ready) before the next.
      const masterName = before.node_identities.find((n) => n.is_master)!.name;
      const order = [...nodes].sort(
        (a, b) => Number(b.spec.name === masterName) - Number(a.spec.name === masterName),
      );
      const restarts: { node: string; stopMs: number; wasMaster: boolean; answers: number }[] = [];
      for (const n of order) {
        const others = nodes.filter((x) => x !== n);
        const wasMaster = (await state(others[0]!)).node_identities.find(
          (x) => x.name === n.spec.name,
        )!.is_master;
        const t0 = Date.now();
        const answered = completed;
        await n.stop(40_000, to);
        const stopMs = Date.now() - t0;
        await n.start();
        await waitForConvergence(nodes, 3, 30_000);
        await twoReady(nodes);
        // Up to 1.5 s more for an answer during this restart (none: the check below fails).
        await waitFor(async () => (completed > answered ? true : undefined), {
          timeoutMs: 1500,
          intervalMs: 50,
          what: "an answer during the restart",
        }).catch(() => undefined);
        restarts.push({ node: n.spec.name, stopMs, wasMaster, answers: completed - answered });
      }

      stopLoad();
      const outcomes = (await Promise.all(clients)).flat();
      await lb.stop();
      const failed = outcomes.filter((o) => !o.ok);
      const after = await state(nodes[0]!);
      process.stderr.write(
        `maintenance: ${outcomes.length} requests (${outcomes.filter((o) => o.stream).length} streaming), ` +
          `${failed.length} failed, ${lb.refused} connection(s) refused and sent elsewhere; restarts ` +
          restarts
            .map(
              (r) =>
                `${r.node}${r.wasMaster ? " (master)" : ""} ${r.stopMs} ms (${r.answers} answers meanwhile)`,
            )
            .join(", ") +
          "\n",
      );
      expect(failed, JSON.stringify(failed.slice(0, 3))).toEqual([]);
      // The load ran through every restart, however slow the machine (each answer takes seconds).
      for (const r of restarts) expect(r.answers, r.node).toBeGreaterThan(0);
      expect(restarts[0]!.wasMaster).toBe(true);
      // One session throughout: the masters handed it off rather than losing it.
      expect(after.session!.session_id).toBe(session);
      const leftSession = nodes.flatMap((n) =>
        n.logLines.filter(
          (l) => l.includes('"msg":"session changed"') && l.includes(`"previous":"${session}"`),
        ),
      );
      expect(leftSession).toEqual([]);
      const logged = (what: string) => nodes.some((n) => n.logLines.some((l) => l.includes(what)));
      expect(logged("handed the master role off")).toBe(true);
      // A draining replica holder's deployment went to the free node before it left.
      expect(logged("placed elsewhere before it leaves")).toBe(true);
      // Each stop was one request: the drains ran to their end, none was cut short.
      expect(logged('"outcome":"cut_short"')).toBe(false);
      // A group delivery reaches the node twice (its own copy, and the supervisor's forward) unless
      // the kernel merges the two: a standard signal still pending when the second comes is one.
      // A parent forking a child, a SIGTERM to their group, the parent forwarding it: the child saw
      // one signal in 3 of 20 tries on an idle machine and 10 of 20 with both cores busy. So the
      // node logs the repeat for some restarts only (none of three once in CI), and what proves the
      // group stop is the checks above: no drain cut short, nothing failed, one session.
      if (to === "group")
        process.stderr.write(
          `maintenance: the repeated stop signal was seen by ${nodes.filter((n) => n.logLines.some((l) => l.includes("sent to the process group): one stop"))).length} of 3 nodes\n`,
        );
    },
    420_000,
  );
});
