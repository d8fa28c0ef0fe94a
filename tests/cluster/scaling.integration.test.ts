// Replicas that follow load, on 3 hosts with real engines (docs/capacity.md): a placement with
// max_replicas 3 starts with one replica; a burst (16 requests kept in flight through the three
// gateways) grows it to 3, each on its own node; a trickle afterwards shrinks it back to 1, each
// step retiring a replica (no new requests) before it is deleted. Every request of the burst and the
// trickle is answered: no scaling step fails one. And a replica whose node is killed while it
// retires is removed with the scale-down, not placed again.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { seedStore, startHostCluster, waitFor, waitForConvergence } from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";

interface StateDoc {
  node_identities: { node_id: string; name: string }[];
  models: { model_id: string }[];
  instances: {
    instance_id: string;
    assignments: { node_id: string }[];
    runners: { state: string }[];
  }[];
  deployments: {
    deployment_id: string;
    instance_id: string;
    replica_set?: string;
    status: string;
    retiring_since?: number;
  }[];
}
interface EventsDoc {
  records: {
    /** This node's log order (the index restarts with each session). */
    seq: number;
    type: string;
    at: number;
    event: {
      cause?: string;
      reason?: string;
      deployment_id?: string;
      deployment?: { deployment_id: string; instance_id: string };
    };
  }[];
}

/** Keeps `concurrency` requests in flight through the nodes in turn until `until()` says stop. */
async function load(
  nodes: readonly NodeProcess[],
  model: string,
  concurrency: number,
  until: () => Promise<boolean>,
): Promise<{ ok: number; failed: string[]; served: { at: number; instance: string }[] }> {
  const out = { ok: 0, failed: [] as string[], served: [] as { at: number; instance: string }[] };
  let stop = false;
  let k = 0;
  const worker = async () => {
    while (!stop) {
      const n = nodes[k++ % nodes.length]!;
      const at = Date.now();
      const r = await n.post("/v1/chat/completions", {
        model,
        messages: [{ role: "user", content: `hello ${k}` }],
        max_tokens: 48,
      });
      const text = await r.text();
      if (r.status === 200) {
        out.ok++;
        out.served.push({ at, instance: r.headers.get("x-instance-id") ?? "" });
      } else out.failed.push(`${r.status} ${text}`);
    }
  };
  const workers = Array.from({ length: concurrency }, worker);
  await waitFor(async () => ((await until()) ? true : undefined), {
    timeoutMs: 60_000,
    intervalMs: 250,
    what: "the replicas to follow the load",
  });
  stop = true;
  await Promise.all(workers);
  return out;
}

/** The instances whose every runner is ready. */
function readyOf(s: StateDoc): StateDoc["instances"] {
  return s.instances.filter(
    (i) => i.runners.length > 0 && i.runners.every((r) => r.state === "RunnerReady"),
  );
}

/**
 * Once the cluster has formed and the model is registered, places it through `via` as a set that
 * follows load (from 1 replica to `max`, growing above `upAt` each) and waits for its first replica.
 */
async function placeFollowingLoad(
  nodes: readonly NodeProcess[],
  via: NodeProcess,
  modelId: string,
  max: number,
  upAt: number,
): Promise<void> {
  await waitForConvergence(nodes, 3);
  await waitFor(
    async () => ((await via.get<StateDoc>("/state")).models.length > 0 ? true : undefined),
    { timeoutMs: 20_000, what: "the model registered" },
  );
  const placed = await via.post("/place_instance", {
    model_id: modelId,
    min_replicas: 1,
    max_replicas: max,
    scale_up_at: upAt,
  });
  expect(placed.status, await placed.clone().text()).toBe(200);
  await waitFor(
    async () => (readyOf(await via.get<StateDoc>("/state")).length === 1 ? true : undefined),
    { timeoutMs: 30_000, what: "the first replica ready" },
  );
}

describe("replicas that follow load (across hosts)", () => {
  it("grows from 1 to 3 replicas under a burst and back to 1 in the quiet, failing no request", async () => {
    const store = mkdtempSync(join(tmpdir(), "ic-store-"));
    const { modelId } = await seedStore(store);
    await using cluster = await startHostCluster(3, {
      config: (i) => ({
        ...(i === 0 ? { store_path: store } : {}),
        cluster: { scale_up_window_ms: 1000, scale_down_window_ms: 3000 },
      }),
    });
    const [n1] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    await placeFollowingLoad(cluster.nodes, n1, modelId, 3, 4);
    const replicas = async () => {
      const s = await n1.get<StateDoc>("/state");
      return { all: s.deployments.length, ready: readyOf(s).length, nodes: s.instances };
    };

    // The burst: 16 in flight, above 4 per replica until there are 3 (its most). The state is
    // kept as seen when the third was ready: once the load stops, the last requests can take
    // longer than the 3 s quiet window to finish, and a scale-down may already have begun.
    let grown: Awaited<ReturnType<typeof replicas>> | undefined;
    const burst = await load(cluster.nodes, modelId, 16, async () => {
      const now = await replicas();
      if (now.ready === 3) grown = now;
      return grown !== undefined;
    });
    expect(burst.failed).toEqual([]);
    if (!grown) throw new Error("the burst ended without three ready replicas");
    expect(grown.all).toBe(3);
    expect(new Set(grown.nodes.map((i) => i.assignments[0]!.node_id)).size).toBe(3);

    // The quiet: one request at a time (within half of 4 per replica for one fewer), down to 1.
    const trickle = await load(cluster.nodes, modelId, 1, async () => (await replicas()).all === 1);
    expect(trickle.failed).toEqual([]);
    expect(trickle.ok).toBeGreaterThan(0);

    // Each step is an event with its reason.
    const events = await n1.get<EventsDoc>("/events?limit=5000");
    const ups = events.records.filter(
      (r) => r.type === "DeploymentCreated" && r.event.reason?.includes("one more"),
    );
    const downs = events.records.filter(
      (r) => r.type === "DeploymentDeleted" && r.event.cause === "scale_down",
    );
    const retired = events.records.filter((r) => r.type === "DeploymentRetiring");
    expect(ups).toHaveLength(2);
    expect(ups[0]!.event.reason).toMatch(
      /^\d+ requests in flight on 1 ready replica\(s\), above 4 each/,
    );
    // Drain before break: each replica deleted had retired first, and was deleted once idle.
    expect(retired).toHaveLength(2);
    expect(retired[0]!.event.reason).toMatch(/one retires \(at least 1\)$/);
    expect(downs).toHaveLength(2);
    const instanceOf = new Map(
      events.records.flatMap((r) =>
        r.event.deployment
          ? [[r.event.deployment.deployment_id, r.event.deployment.instance_id]]
          : [],
      ),
    );
    for (const d of downs) {
      const r = retired.find((x) => x.event.deployment_id === d.event.deployment_id);
      expect(r && r.seq < d.seq, d.event.deployment_id).toBe(true);
      expect(d.event.reason).toMatch(
        /^the retiring replica's requests ended after [\d.]+ s: removed$/,
      );
      // No request began on it once every gateway had the event (a second is ample on one machine).
      const instance = instanceOf.get(d.event.deployment_id!);
      expect(instance).toBeDefined();
      const late = trickle.served.filter((x) => x.instance === instance && x.at > r!.at + 1000);
      expect(late, `requests sent to retiring ${instance}`).toEqual([]);
    }
  });

  it("a node killed while its replica retires: the replica is removed, not placed again", async () => {
    const store = mkdtempSync(join(tmpdir(), "ic-store-"));
    const { modelId } = await seedStore(store);
    await using cluster = await startHostCluster(3, {
      config: (i) => ({
        ...(i === 0 ? { store_path: store } : {}),
        cluster: {
          scale_up_window_ms: 1000,
          scale_down_window_ms: 3000,
          heartbeat_ms: 500,
          liveness_timeout_ms: 2000,
        },
      }),
    });
    const nodes = cluster.nodes as readonly NodeProcess[];
    const [n1] = nodes as [NodeProcess];
    await placeFollowingLoad(nodes, n1, modelId, 2, 2);
    // Grow to 2 with a burst, then stop the load: the quiet retires one of the two.
    const burst = await load(
      nodes,
      modelId,
      8,
      async () => readyOf(await n1.get<StateDoc>("/state")).length === 2,
    );
    expect(burst.failed).toEqual([]);
    let victim: { deployment: string; node: NodeProcess } | undefined;
    await waitFor(
      async () => {
        const s = await n1.get<StateDoc>("/state");
        const d = s.deployments.find((x) => x.retiring_since !== undefined);
        const inst = d && s.instances.find((i) => i.instance_id === d.instance_id);
        const id = inst?.assignments[0]?.node_id;
        const name = s.node_identities.find((m) => m.node_id === id)?.name;
        const node = nodes.find((x) => x.spec.name === name);
        if (d && node) victim = { deployment: d.deployment_id, node };
        return victim ? true : undefined;
      },
      { timeoutMs: 30_000, intervalMs: 100, what: "a replica retiring" },
    );
    // Its node dies before the retirement ends: the replica goes with the scale-down, and the master
    // does not place the lost instance again.
    victim!.node.kill("SIGKILL");
    const survivor = nodes.find((x) => x !== victim!.node && x.running)!;
    await waitFor(
      async () => {
        const s = await survivor.get<StateDoc>("/state");
        return s.deployments.length === 1 && s.node_identities.length === 2 ? true : undefined;
      },
      { timeoutMs: 30_000, what: "the retiring replica removed after its node died" },
    );
    const events = await survivor.get<EventsDoc>("/events?limit=5000");
    const deleted = events.records.find(
      (r) => r.type === "DeploymentDeleted" && r.event.deployment_id === victim!.deployment,
    );
    expect(deleted?.event.cause).toBe("scale_down");
    // Never placed again: no instance was placed for it (a re-placement names its deployment).
    const replaced = events.records.filter(
      (r) => r.type === "InstancePlaced" && r.event.deployment_id === victim!.deployment,
    );
    expect(replaced).toEqual([]);
    // The set still serves from its remaining replica.
    const r = await survivor.post("/v1/chat/completions", {
      model: modelId,
      messages: [{ role: "user", content: "hello again" }],
      max_tokens: 8,
    });
    expect(r.status, await r.clone().text()).toBe(200);
  });
});
