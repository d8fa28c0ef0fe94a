// The cluster bench/cluster-chat measures: n nodes on lab hosts (network namespaces), as deployed
// (TLS, bearer tokens), each running the stand-in engine as its llama-server, the tiny model placed
// once per node; and what the bench reads from it between two points in time: the master's state
// index, every node's bus traffic and durable event-log writes.
import { mkdtemp, rm } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  placeAndWait,
  seedStore,
  startHostCluster,
  waitForConvergence,
  waitForReadyInstances,
} from "@ic/testkit";
import type { HostCluster, NodeProcess } from "@ic/testkit";
import type { Target } from "./load.ts";
import { STAND_IN, standInsOn } from "../lib/stand-in.ts";

export interface Bench {
  /** The bench's own files (the store); removed with the cluster. */
  readonly dir: string;
  readonly cluster: HostCluster;
  readonly modelId: string;
  readonly ca: string;
  readonly gateways: Target[];
  readonly engines: Target[];
  /** Node names by pid, the master first. */
  readonly pids: { name: string; pid: number; master: boolean }[];
  readonly profileDir: string | undefined;
}

interface StateDoc {
  index: number;
  this_node: { name: string; is_master: boolean };
  node_identities: { node_id: string; name: string; is_master: boolean }[];
  instances: {
    instance_id: string;
    runners: { rank: number; node_id: string; endpoint?: string; state: string }[];
  }[];
}

/** Starts the cluster, places one instance per node and finds every gateway and engine. */
export async function startBench(n: number, profileDir: string | undefined): Promise<Bench> {
  const dir = await mkdtemp(join(tmpdir(), "bench-cluster-chat-"));
  const { store, modelId } = await seedStore(join(dir, "store"));
  const cluster = await startHostCluster(n, {
    config: (i) => ({
      // As deployed: the spec's timings, not the test kit's fast ones (a heartbeat every 0.5 s, a
      // dashboard sample a second).
      cluster: {
        heartbeat_ms: 2000,
        liveness_timeout_ms: 4000,
        election_timeout_ms: 3000,
        info_pending_wait_ms: 15000,
      },
      dashboard: { sample_interval_ms: 10_000 },
      engine: { server_bin: STAND_IN },
      ...(i === 0 ? { store_path: store } : {}),
    }),
    // The master and one gateway that is not the master.
    ...(profileDir
      ? {
          // One directory per node: each of its threads writes its own profile there.
          nodeArgs: (i: number) =>
            i < 2 ? ["--cpu-prof", `--cpu-prof-dir=${join(profileDir, `node-${i + 1}`)}`] : [],
        }
      : {}),
  });
  try {
    await waitForConvergence(cluster.nodes, n);
    for (let k = 0; k < n; k++)
      await placeAndWait(cluster.nodes[0]!, { model_id: modelId, min_nodes: 1 });
    const state = await waitForReadyInstances<StateDoc>(cluster.nodes[0]!, n);
    return {
      dir,
      cluster,
      modelId,
      ca: readFileSync(cluster.certs!.caFile, "utf8"),
      gateways: cluster.nodes.map((node) => gatewayOf(cluster, node)),
      engines: enginesOf(cluster, state),
      pids: cluster.nodes.map((node) => ({
        name: node.spec.name,
        pid: node.pid!,
        master: state.node_identities.find((m) => m.name === node.spec.name)?.is_master ?? false,
      })),
      profileDir,
    };
  } catch (e) {
    await cluster[Symbol.asyncDispose]();
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
}

function gatewayOf(cluster: HostCluster, node: NodeProcess): Target {
  const host = cluster.lab.hosts.find((h) => h.name === node.spec.name)!;
  return { url: `https://${host.address}:8080`, headers: node.authHeaders };
}

/** Each ready instance's engine, reached at its host's address with the key it was started with. */
function enginesOf(cluster: HostCluster, state: StateDoc): Target[] {
  return state.instances.map((inst) => {
    const r0 = inst.runners.find((r) => r.rank === 0)!;
    const name = state.node_identities.find((m) => m.node_id === r0.node_id)!.name;
    const host = cluster.lab.hosts.find((h) => h.name === name)!;
    const port = Number(new URL(r0.endpoint!).port);
    const found = standInsOn([name, host.address, "0.0.0.0"]).find((e) => e.port === port);
    if (!found)
      throw new Error(`no stand-in engine on ${name}:${port} (${new URL(r0.endpoint!).host})`);
    return {
      url: `https://${host.address}:${port}`,
      headers: { authorization: `Bearer ${found.key}` },
    };
  });
}

/** What the cluster has counted so far: the master's index, bus traffic and event-log writes. */
export interface Counters {
  readonly index: number;
  /** Per node, in node order. */
  readonly busMsgs: number[];
  readonly busBytes: number[];
  readonly logRecords: number[];
  readonly logBytes: number[];
}

const metric = (text: string, name: string): number =>
  [...text.matchAll(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, "gm"))].reduce(
    (s, m) => s + Number(m[1]),
    0,
  );

interface Usage {
  records_written: number;
  active_bytes: number;
  archive_bytes: number;
}

export async function counters(b: Bench): Promise<Counters> {
  const master = b.cluster.nodes[b.pids.findIndex((p) => p.master)]!;
  const index = (await master.get<StateDoc>("/state")).index;
  const per = await Promise.all(
    b.cluster.nodes.map(async (node) => {
      const text = await (
        await fetch(`${node.apiUrl}/metrics`, { headers: node.authHeaders })
      ).text();
      const usage = (await node.get<{ usage: Usage }>("/events?limit=1")).usage;
      return {
        msgs: metric(text, "ic_bus_messages_total"),
        bytes: metric(text, "ic_bus_bytes_total"),
        records: usage.records_written,
        logBytes: usage.active_bytes + usage.archive_bytes,
      };
    }),
  );
  return {
    index,
    busMsgs: per.map((p) => p.msgs),
    busBytes: per.map((p) => p.bytes),
    logRecords: per.map((p) => p.records),
    logBytes: per.map((p) => p.logBytes),
  };
}
