// Draining across 3 hosts with real llama-servers: SIGTERM to a node that holds one of a model's two
// instances, under steady streaming and non-streaming load through another node. The gateways route
// around it at once, what was in flight there finishes, /health says draining meanwhile, and no
// client sees a failure. And make before break: SIGTERM to the node holding a model's only
// instance, whose replacement takes seconds to load, under load without pause: no failed request.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  loadDelayEngine,
  placeAndWait,
  seedStore,
  startHostCluster,
  waitFor,
  waitForConvergence,
} from "@ic/testkit";
import type { HostCluster } from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

interface StateDoc {
  node_identities: { node_id: string; name: string }[];
}

let cluster: HostCluster;
let modelId: string;
/** Its engine takes LOAD_DELAY_S longer to load (loadDelayEngine), on every node. */
let slowLoadId: string;
const LOAD_DELAY_S = 4;
const DRAIN_TIMEOUT_MS = 60_000;

beforeAll(async () => {
  const store = mkdtempSync(join(tmpdir(), "ic-store-"));
  ({ modelId } = await seedStore(store, { modelId: "test/drain-slow", slow: true }));
  ({ modelId: slowLoadId } = await seedStore(store, { modelId: "test/slow-load" }));
  const engineBin = loadDelayEngine({
    dir: mkdtempSync(join(tmpdir(), "ic-engine-")),
    delayS: LOAD_DELAY_S,
    match: "slow-load",
  });
  cluster = await startHostCluster(3, {
    config: (i) => ({
      // Well above a drain's length on a loaded 2-core machine (up to 30 s with other suites beside).
      node: { drain_timeout_ms: DRAIN_TIMEOUT_MS },
      engine: { context_size: 4096, extra_args: ["-np", "4"], server_bin: engineBin },
      ...(i === 0 ? { store_path: store } : {}),
    }),
    env: (i): Record<string, string> => (i === 0 ? { LOG_LEVEL: "debug" } : {}),
  });
  await waitForConvergence(cluster.nodes, 3);
}, 180_000);

afterAll(async () => {
  await cluster?.[Symbol.asyncDispose]();
});

/** Requests answered (or failed) so far, by every client. */
let completed = 0;

/** One client sending request after request (streaming and not, in turn) until `until` resolves. */
async function client(node: NodeProcess, until: Promise<void>, model = modelId, maxTokens = 60) {
  const outcomes: { ok: boolean; status: number; detail: string }[] = [];
  let done = false;
  void until.then(() => (done = true));
  for (let i = 0; !done; i++) {
    const stream = i % 2 === 0;
    try {
      const r = await fetch(`${node.apiUrl}/v1/chat/completions`, {
        method: "POST",
        headers: { ...node.authHeaders, "content-type": "application/json" },
        body: JSON.stringify({
          model,
          messages: [{ role: "user", content: "Tell me a story." }],
          max_tokens: maxTokens,
          stream,
        }),
      });
      const text = await r.text();
      const ok =
        r.status === 200 && (!stream || (text.includes("[DONE]") && !text.includes('"error"')));
      outcomes.push({ ok, status: r.status, detail: ok ? "" : text.slice(0, 300) });
    } catch (e) {
      outcomes.push({ ok: false, status: 0, detail: String(e) });
    }
    completed++;
  }
  return outcomes;
}

describe("drain", () => {
  it("SIGTERM to a node holding one of two instances under load: no failed request, /health says draining, then it leaves", async () => {
    const [n1, n2, n3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    const doc = await n1.get<StateDoc>("/state");
    const id = (name: string) => doc.node_identities.find((n) => n.name === name)!.node_id;
    await Promise.all([
      placeAndWait(n1, { model_id: modelId, excluded_nodes: [id("node-1"), id("node-3")] }),
      placeAndWait(n1, { model_id: modelId, excluded_nodes: [id("node-1"), id("node-2")] }),
    ]);

    let stopLoad!: () => void;
    const until = new Promise<void>((r) => (stopLoad = r));
    const clients = Array.from({ length: 4 }, () => client(n1, until));
    await new Promise((r) => setTimeout(r, 2000));

    // While node-3 drains, its /health answers 503 draining (load balancers stop sending).
    const healthSeen = new Set<string>();
    let watching = true;
    const watchHealth = (async () => {
      while (watching) {
        try {
          const r = await fetch(`${n3.apiUrl}/health`, { signal: AbortSignal.timeout(1000) });
          const body = (await r.json()) as { error?: { details?: { reason?: string } } };
          healthSeen.add(
            r.status === 200 ? "ok" : (body.error?.details?.reason ?? String(r.status)),
          );
        } catch {
          healthSeen.add("gone");
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    const stoppedAt = Date.now();
    await n3.stop(DRAIN_TIMEOUT_MS + 10_000);
    const stopMs = Date.now() - stoppedAt;
    watching = false;
    await watchHealth;

    // The load goes on through node-2's instance (at least 4 more answers, 9 in all); then it
    // stops. An answer of 60 tokens takes seconds when other suites share the cores.
    const after = completed;
    await waitFor(async () => (completed >= Math.max(after + 4, 9) ? true : undefined), {
      timeoutMs: 90_000,
      what: "4 answers after the drain",
    });
    stopLoad();
    const outcomes = (await Promise.all(clients)).flat();
    const failed = outcomes.filter((o) => !o.ok);
    const why = n1.logLines
      .filter((l) => /retry|lost|draining|before the first/i.test(l))
      .slice(-10);
    expect(failed, `${JSON.stringify(failed.slice(0, 3))}\n${why.join("\n")}`).toEqual([]);
    expect(outcomes.length).toBeGreaterThan(8);
    expect(healthSeen.has("draining"), [...healthSeen].join(",")).toBe(true);
    // It drained (in-flight requests ended) rather than running into the timeout.
    const drained = n3.logLines.find((l) => l.includes('"msg":"drained"'));
    expect(drained, n3.logLines.slice(-20).join("\n")).toBeDefined();
    expect(drained).not.toContain('"outcome":"timeout"');
    expect(stopMs).toBeLessThan(DRAIN_TIMEOUT_MS);
    expect(n2.running).toBe(true);
  }, 240_000);

  it("SIGTERM to the node holding a model's only instance, its replacement seconds from ready, under load without pause: no failed request (make before break)", async () => {
    const [n1, n2, n3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    if (!n3.running) await n3.start();
    await waitForConvergence(cluster.nodes, 3, 30_000);
    const doc = await n1.get<StateDoc>("/state");
    const id = (name: string) => doc.node_identities.find((n) => n.name === name)!.node_id;
    // Off node-1 (the clients' gateway): on node-2 or node-3, and its replacement on the other.
    const placed = await placeAndWait(n1, { model_id: slowLoadId, excluded_nodes: [id("node-1")] });
    const holderName = doc.node_identities.find(
      (n) => n.node_id === placed.assignments[0]!.node_id,
    )!.name;
    const holder = holderName === "node-2" ? n2 : n3;

    let stopLoad!: () => void;
    const until = new Promise<void>((r) => (stopLoad = r));
    const clients = Array.from({ length: 6 }, () => client(n1, until, slowLoadId, 8));
    await new Promise((r) => setTimeout(r, 1000));
    await holder.stop(DRAIN_TIMEOUT_MS + 10_000);
    // The load goes on through the replacement; then the clients stop.
    await new Promise((r) => setTimeout(r, 1500));
    stopLoad();
    const outcomes = (await Promise.all(clients)).flat();
    const failed = outcomes.filter((o) => !o.ok);
    expect(failed, JSON.stringify(failed.slice(0, 3))).toEqual([]);
    expect(outcomes.length).toBeGreaterThan(20);
    // The gap was there to hide: the drain waited for a replacement that took seconds to load.
    const drained = holder.logLines.find((l) => l.includes('"msg":"drained"'));
    expect(drained, holder.logLines.slice(-20).join("\n")).toBeDefined();
    const waited = Number(/"waitedMs":(\d+)/.exec(drained!)?.[1]);
    process.stderr.write(
      `hand-over: ${outcomes.length} requests, ${failed.length} failed; the drain waited ${waited} ms for a replacement that loads in ${LOAD_DELAY_S} s\n`,
    );
    // Most of the load delay (the replacement may start a moment before the drain's clock does).
    expect(waited).toBeGreaterThanOrEqual((LOAD_DELAY_S - 1) * 1000);
    expect(drained).toContain('"outcome":"idle"');
  }, 120_000);
});
