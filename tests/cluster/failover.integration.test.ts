// Failover by connection loss, across hosts (network namespaces, as deployed). The timeouts are set
// long here (liveness 30 s, election 20 s), so whatever happens within a few seconds of a kill can
// only come from the fast path: the watch connection drops, the bus probes go unanswered, and the
// peer is declared gone. A host cut off by the network closes nothing, so it is found by the timeouts.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { placeAndWait, seedStore, startHostCluster, waitFor } from "@ic/testkit";
import type { HostCluster, NodeProcess } from "@ic/testkit";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const SLOW = {
  heartbeat_ms: 1000,
  liveness_timeout_ms: 30_000,
  election_timeout_ms: 20_000,
  info_pending_wait_ms: 15_000,
};
/** Well inside both timeouts: a failover seen before this came from the fast path. */
const FAST_BOUND_MS = 8000;

interface StateDoc {
  session: { session_id: string } | null;
  this_node: { name: string; synced: boolean; is_master: boolean };
  node_identities: { node_id: string; name: string; is_master: boolean }[];
}

interface EventsDoc {
  records: { event: { type: string; node_id?: string; reason?: string } }[];
}

const state = (n: NodeProcess) => n.get<StateDoc>("/state");

async function converged(nodes: readonly NodeProcess[], names: readonly string[]) {
  return waitFor(
    async () => {
      const docs = await Promise.all(nodes.map(state));
      const ids = new Set(docs.map((d) => d.session?.session_id));
      const ok =
        ids.size === 1 &&
        docs.every(
          (d) =>
            d.this_node.synced &&
            d.node_identities
              .map((x) => x.name)
              .sort()
              .join() === [...names].sort().join(),
        );
      return ok ? docs : undefined;
    },
    { timeoutMs: 60_000, intervalMs: 50, what: `${names.join(",")} in one session` },
  );
}

describe("failover by connection loss (long timeouts: only the fast path can be this quick)", () => {
  let cluster: HostCluster;
  let modelId: string;

  beforeAll(async () => {
    const store = mkdtempSync(join(tmpdir(), "ic-failover-store-"));
    ({ modelId } = await seedStore(store));
    cluster = await startHostCluster(4, {
      config: (i) => ({
        cluster: SLOW,
        logging: { level: "info" },
        ...(i === 0 ? { store_path: store } : {}),
      }),
    });
    await converged(cluster.nodes, ["node-1", "node-2", "node-3", "node-4"]);
  }, 120_000);

  afterAll(async () => {
    await cluster?.[Symbol.asyncDispose]();
  });

  it("kill -9 of a worker: NodeLeft 'connection lost' on every survivor, and its open stream fails", async () => {
    const n1 = cluster.node("node-1");
    const [doc] = await converged(cluster.nodes, ["node-1", "node-2", "node-3", "node-4"]);
    const id = (name: string) => doc!.node_identities.find((n) => n.name === name)!.node_id;
    const others = ["node-1", "node-2", "node-3"].map(id);
    // The only instance, on node-4.
    await placeAndWait(n1, { model_id: modelId, min_nodes: 1, excluded_nodes: others });
    const r = await n1.post("/v1/chat/completions", {
      model: modelId,
      stream: true,
      max_tokens: 4000,
      messages: [{ role: "user", content: "Write a very long story about the sea." }],
    });
    expect(r.status).toBe(200);
    const reader = r.body!.getReader();
    const first = await reader.read();
    expect(first.done).toBe(false);
    const victim = cluster.node("node-4");
    const killedAt = Date.now();
    victim.kill("SIGKILL");
    // The stream ends with the gateway's typed error event (not a hang until a timeout).
    let text = "";
    for (;;) {
      const c = await reader.read();
      if (c.done) break;
      text += new TextDecoder().decode(c.value);
    }
    const streamEnded = Date.now() - killedAt;
    expect(text).toMatch(/"code":"(instance_lost|task_failed|upstream_failed)"/);
    expect(streamEnded).toBeLessThan(FAST_BOUND_MS);

    const survivors = ["node-1", "node-2", "node-3"].map((n) => cluster.node(n));
    await converged(survivors, ["node-1", "node-2", "node-3"]);
    const gone = Date.now() - killedAt;
    expect(gone).toBeLessThan(FAST_BOUND_MS);
    const ev = await n1.get<EventsDoc>("/events?type=NodeLeft&limit=100");
    const left = ev.records;
    expect(left.map((e) => [e.event.node_id, e.event.reason])).toEqual([
      [id("node-4"), "connection lost"],
    ]);
  }, 120_000);

  it("kill -9 of the master: the survivors start a new session without it, long before the election timeout", async () => {
    const survivors = ["node-2", "node-3"].map((n) => cluster.node(n));
    const before = await state(cluster.node("node-1"));
    expect(before.this_node.is_master).toBe(true);
    const killedAt = Date.now();
    cluster.node("node-1").kill("SIGKILL");
    const docs = await converged(survivors, ["node-2", "node-3"]);
    expect(Date.now() - killedAt).toBeLessThan(FAST_BOUND_MS);
    expect(docs[0]!.session!.session_id).not.toBe(before.session!.session_id);
    expect(docs.find((d) => d.this_node.is_master)?.this_node.name).toBe("node-2");
  }, 120_000);
});
