// The cluster the workload benchmarks run on: `nodes` nodes on loopback, the wide test model (F16,
// 384 wide, 6 layers; its byte-level vocabulary makes about 0.75 tokens of a character of the
// shapes' text) with one replica per node,
// each llama-server on one thread with `slots` slots of `slotContext` tokens and no host-memory
// prompt cache beyond them (`--cache-ram 0`): each replica keeps `slots` prompts, as a GPU whose KV
// room holds a few long prompts does. `prefixRouting` is the gateways' chat.prefix_routing.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  seedStore,
  startCluster,
  waitFor,
  waitForConvergence,
  waitForReadyInstances,
} from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";
import type { Target } from "./load.ts";

export interface BenchCluster extends AsyncDisposable {
  readonly nodes: readonly NodeProcess[];
  readonly target: Target;
}

export interface ClusterShape {
  readonly nodes: number;
  readonly slots: number;
  readonly slotContext: number;
  readonly prefixRouting: "cache" | "hash" | "off";
}

export async function startBenchCluster(s: ClusterShape): Promise<BenchCluster> {
  const store = await mkdtemp(join(tmpdir(), "ic-bench-workload-"));
  const { modelId } = await seedStore(store, { modelId: "bench/workload-wide", slow: true });
  const cluster = await startCluster(s.nodes, {
    config: (i) => ({
      chat: { prefix_routing: s.prefixRouting },
      engine: {
        context_size: s.slots * s.slotContext,
        extra_args: ["-np", String(s.slots), "-t", "1", "--cache-ram", "0"],
      },
      ...(i === 0 ? { store_path: store } : {}),
    }),
  });
  const nodes = cluster.nodes;
  try {
    await waitForConvergence(nodes, s.nodes);
    await waitFor(
      async () =>
        (await nodes[0]!.get<{ models: unknown[] }>("/state")).models.length > 0 ? true : undefined,
      { timeoutMs: 30_000, what: "the model registered" },
    );
    const placed = await nodes[0]!.post("/place_instance", {
      model_id: modelId,
      replicas: s.nodes,
    });
    if (placed.status !== 200) throw new Error(`place_instance ${placed.status}`);
    await waitForReadyInstances(nodes[0]!, s.nodes, 120_000);
  } catch (e) {
    await cluster[Symbol.asyncDispose]();
    await rm(store, { recursive: true, force: true });
    throw e;
  }
  return {
    nodes,
    target: {
      baseUrls: nodes.map((n) => n.apiUrl),
      model: modelId,
      headers: nodes[0]!.authHeaders,
    },
    async [Symbol.asyncDispose]() {
      await cluster[Symbol.asyncDispose]();
      await rm(store, { recursive: true, force: true });
    },
  };
}
