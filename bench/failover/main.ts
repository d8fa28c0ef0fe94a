// Failover timing across hosts with the spec's default timings (heartbeat 2 s, election timeout 3 s,
// liveness 4 s): three nodes, each on its own lab host (network namespace; startHostCluster), once
// with the routes direct over the lab bridge and once through a user-space relay that adds 20 ms each
// way. kill -9 of the master -> every survivor in one new session; kill -9 of a worker -> gone from
// node_identities on every survivor. Medians of several runs, as ratios of the configured timeouts.
// Also, direct routes only: kill -9 of the node holding a model's only instance (a deployment) ->
// a 2-token chat through a survivor answers 200 again, against liveness timeout + a plain runner
// start (POST /place_instance on a node with no staged copy -> the first 200 chat) from the same run.
// Reports only: no timing is asserted (a broken setup -- a route that bypasses its relay -- throws).
// The scenario runners are kill.ts and serving.ts, the measurement helpers and tables analysis.ts,
// the report's text report.ts; common.ts holds the timings and the samples' shapes.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { seedStore } from "@ic/testkit";
import { analyzeKills, analyzeServing } from "./analysis.ts";
import { PLAN, RUNS } from "./common.ts";
import type { Kind, Sample } from "./common.ts";
import { once } from "./kill.ts";
import { writeReport } from "./report.ts";
import { onceServing } from "./serving.ts";
import type { ServeSample } from "./serving.ts";

/** Every run's samples: the kills' per setting, and the serving-again ones. */
interface Runs {
  samples: Map<string, Sample[]>;
  serving: ServeSample[];
}

const key = (kind: Kind, delay: number) => `${kind}/${delay}`;

/** RUNS rounds of a serving-again run then every kill setting, against one seeded store. */
async function runAll(): Promise<Runs> {
  const samples = new Map<string, Sample[]>();
  const serving: ServeSample[] = [];
  // One store for every run (node-1's store_path); each run's cluster stages from it afresh.
  const storeDir = await mkdtemp(join(tmpdir(), "ic-bench-store-"));
  const { modelId } = await seedStore(storeDir);
  for (let i = 0; i < RUNS; i++) {
    {
      const s = await onceServing(storeDir, modelId);
      serving.push(s);
      console.log(`run ${i + 1}, model serving again: ${JSON.stringify(s)}`);
    }
    // Interleaved, so slow drifts of the machine's load touch every setting alike.
    for (const [kind, delay] of PLAN) {
      const s = await once(kind, delay, storeDir, modelId);
      const list = samples.get(key(kind, delay)) ?? [];
      list.push(s);
      samples.set(key(kind, delay), list);
      console.log(`run ${i + 1}, route delay ${delay} ms, ${kind}: ${JSON.stringify(s)}`);
    }
  }
  await rm(storeDir, { recursive: true, force: true });
  return { samples, serving };
}

async function main(): Promise<void> {
  const { samples, serving } = await runAll();
  const list = (kind: Kind, delay: number) => samples.get(key(kind, delay)) ?? [];
  const kills = analyzeKills(list);
  console.log([...kills.fromKill, "", ...kills.parts, "", kills.outcomes].join("\n"));
  const again = analyzeServing(serving);
  kills.fromKill.push(again.row);
  console.log([...again.serveSteps, "", again.answerList].join("\n"));
  await writeReport(kills, again);
}

await main();
