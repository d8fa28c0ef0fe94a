// What one chat request costs the replicated control log: events sequenced by the master, bytes sent
// to every node on the bus (`ic.events`), and records and bytes written to each node's durable event
// log. Three nodes on loopback, the tiny model placed once, N non-streaming chat requests through a
// follower at concurrency 4; the figures are deltas over the requests only (read through the API:
// the master's /state index, a follower's GET /events and its event-log usage).
// Usage: npm run bench replication   (BENCH_REQUESTS, default 400)
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { placeAndWait, seedStore, startCluster, waitForConvergence } from "@ic/testkit";
import type { NodeProcess } from "@ic/testkit";
import { machineLine, writeSection } from "../lib/report.ts";

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 400);
const CONCURRENCY = 4;

interface Usage {
  records_written: number;
  active_bytes: number;
  archive_bytes: number;
}
interface EventsDoc {
  usage: Usage;
  records: { seq: number; index: number; session_id: string; at: number; event: unknown }[];
}

/** Bytes of the events a node received on the bus after `seq` (as IndexedEvent JSON). */
async function eventsAfter(node: NodeProcess, seq: number): Promise<{ n: number; bytes: number }> {
  let n = 0;
  let bytes = 0;
  for (let after = seq; ;) {
    const doc = await node.get<EventsDoc>(`/events?after_seq=${after}&limit=1000`);
    for (const r of doc.records) {
      n++;
      bytes += Buffer.byteLength(
        JSON.stringify({ index: r.index, session_id: r.session_id, at: r.at, event: r.event }),
      );
      after = r.seq;
    }
    if (doc.records.length < 1000) return { n, bytes };
  }
}

async function lastSeq(node: NodeProcess): Promise<number> {
  let last = 0;
  for (;;) {
    const doc = await node.get<EventsDoc>(`/events?after_seq=${last}&limit=1000`);
    if (doc.records.length === 0) return last;
    last = doc.records.at(-1)!.seq;
  }
}

const usage = async (n: NodeProcess) => (await n.get<EventsDoc>("/events?limit=1")).usage;
const masterIndex = async (n: NodeProcess) => (await n.get<{ index: number }>("/state")).index;

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "bench-replication-"));
  const { store, modelId } = await seedStore(join(dir, "store"));
  await using cluster = await startCluster(3, {
    config: (i) => (i === 0 ? { store_path: store } : {}),
  });
  const [master, follower] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
  await waitForConvergence(cluster.nodes, 3);
  await placeAndWait(follower, { model_id: modelId, min_nodes: 1 });
  const chat = () =>
    follower.post("/v1/chat/completions", {
      model: modelId,
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 2,
    });
  // Warm-up, then let the task bookkeeping of the warm-up settle.
  for (let i = 0; i < 8; i++) await (await chat()).arrayBuffer();
  await new Promise((r) => setTimeout(r, 1500));
  const idx0 = await masterIndex(master);
  const seq0 = await lastSeq(follower);
  const use0 = await usage(follower);
  let next = 0;
  let failed = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < REQUESTS) {
        next++;
        const r = await chat();
        await r.arrayBuffer();
        if (r.status !== 200) failed++;
      }
    }),
  );
  await new Promise((r) => setTimeout(r, 1500));
  const idx1 = await masterIndex(master);
  const got = await eventsAfter(follower, seq0);
  const use1 = await usage(follower);
  const per = (x: number) => (x / REQUESTS).toFixed(2);
  const logBytes =
    use1.active_bytes + use1.archive_bytes - (use0.active_bytes + use0.archive_bytes);
  const rows = [
    ["events sequenced by the master", per(idx1 - idx0)],
    ["events received by each follower", per(got.n)],
    ["bytes on the bus to each node (ic.events)", per(got.bytes)],
    ["durable event-log records per node", per(use1.records_written - use0.records_written)],
    ["durable event-log bytes per node", per(logBytes)],
  ];
  const table = [
    "| per chat request | value |",
    "| --- | --- |",
    ...rows.map(([k, v]) => `| ${k} | ${v} |`),
  ].join("\n");
  console.log(table);
  console.log(`${REQUESTS} requests, ${failed} failed`);
  await writeSection(
    process.env.BENCH_SECTION ?? "Replicated log per chat request",
    [
      `\`npm run bench replication\`: 3 nodes on loopback, the tiny model placed once, ${REQUESTS} non-streaming chat requests (max_tokens 2) through a follower at concurrency ${CONCURRENCY}; deltas over the requests only. ${failed} failed. ${machineLine()}.`,
      "",
      table,
    ].join("\n"),
  );
  await rm(dir, { recursive: true, force: true });
}

await main();
