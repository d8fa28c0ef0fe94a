// The local cluster of `npm start`: brings up N nodes on loopback, generates the tiny demo model into
// the first node's store, places it, and prints the base URL, a ready-to-paste curl and where every
// log is. Nodes run with the documented defaults; only names, ports and file locations are chosen here.
// Ctrl-C stops every node.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { writeTinyModel } from "@ic/gguf";
import { newClusterSecret, prepareNode, waitForConvergence } from "./node-process.ts";
import type { NodeProcess } from "./node-process.ts";
import { freePort, waitFor } from "@ic/process";
import type { StartOptions } from "./start-args.ts";

const MODEL_ID = "demo/tiny-llama";

/** The launcher talks to the operator's terminal (the nodes log JSON to their files). */
const say = (line: string) => void process.stdout.write(`${line}\n`);
const complain = (line: string) => void process.stderr.write(`${line}\n`);

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once("error", () => resolve(false));
    s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
  });
}

/** Where a real model's GGUF goes to be registered by the local store host. */
const modelDirHint = (store: string) => join(store, "<org>--<name>/");

/** Runs the local cluster until a signal; resolves with an exit code only when starting failed. */
export async function runLocalCluster(o: StartOptions): Promise<number> {
  const { nodes: n, dataDir: root, verbose } = o;
  mkdirSync(root, { recursive: true });
  const store = join(root, "store");
  const modelDir = join(store, "demo--tiny-llama");
  mkdirSync(modelDir, { recursive: true });
  if (!existsSync(join(modelDir, "tiny-llama.gguf"))) {
    const m = await writeTinyModel(join(modelDir, "tiny-llama.gguf"));
    say(`generated the demo model ${MODEL_ID} (${m.bytes} bytes)`);
  }

  // The local nodes share one cluster secret, made on first start and kept (mode 0600) for the next.
  const secretFile = join(root, "cluster.secret");
  if (!existsSync(secretFile))
    writeFileSync(secretFile, `${newClusterSecret()}\n`, { mode: 0o600 });
  const secret = readFileSync(secretFile, "utf8").trim();

  const basePort = o.port;
  const clusterPorts: number[] = [];
  for (let i = 0; i < n; i++) clusterPorts.push(await freePort());
  const nodes: NodeProcess[] = [];
  for (let i = 0; i < n; i++) {
    const want = basePort + i;
    const apiPort = (await portFree(want)) ? want : 0;
    nodes.push(
      prepareNode({
        name: `local-${i + 1}`,
        clusterPort: clusterPorts[i]!,
        peers: clusterPorts.filter((_, j) => j !== i).map((p) => `127.0.0.1:${p}`),
        secret,
        dataDir: join(root, `node-${i + 1}`),
        verbose,
        logFile: join(root, `node-${i + 1}`, "node.log"),
        config: {
          node: { api_port: apiPort },
          // Everything else keeps the documented defaults (timings, backoffs, limits); the demo
          // model's own context length is 2048.
          engine: { context_size: 2048 },
          ...(i === 0
            ? {
                store_path: store,
                node_overrides: {
                  "local-1": { model_store: { staging: { cleanup_on_deactivate: false } } },
                },
              }
            : {}),
        },
      }),
    );
  }
  const stopAll = async () => {
    await Promise.all(nodes.map((x) => x.stop(10_000)));
  };
  let stopping = false;
  const onSignal = () => {
    if (stopping) return;
    stopping = true;
    say("\nstopping the local cluster...");
    void stopAll().then(() => process.exit(0));
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);

  try {
    for (const node of nodes) {
      await node.start(60_000);
      say(`started ${node.spec.name} at ${node.apiUrl}`);
    }
    await waitForConvergence(nodes, n, 30_000);
    const base = nodes[0]!.apiUrl;
    await waitFor(
      async () => {
        const s = await nodes[0]!.get<{ models: { model_id: string }[] }>("/state");
        return s.models.some((m) => m.model_id === MODEL_ID) ? true : undefined;
      },
      { timeoutMs: 30_000, what: "the demo model to be registered" },
    );
    const state = await nodes[0]!.get<{ instances: { model_id: string }[] }>("/state");
    if (!state.instances.some((i) => i.model_id === MODEL_ID)) {
      const r = await fetch(`${base}/place_instance`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model_id: MODEL_ID, min_nodes: 1, excluded_nodes: [] }),
      });
      if (!r.ok) throw new Error(`placing ${MODEL_ID} failed: ${r.status} ${await r.text()}`);
    }
    await waitFor(
      async () => {
        const r = await fetch(`${base}/v1/models`);
        const body = (await r.json()) as { data: { id: string }[] };
        if (!body.data.some((m) => m.id === MODEL_ID)) return undefined;
        const s = await nodes[0]!.get<{
          instances: { model_id: string; runners: { rank: number; state: string }[] }[];
        }>("/state");
        const inst = s.instances.find((i) => i.model_id === MODEL_ID);
        return inst?.runners.some((r0) => r0.rank === 0 && r0.state === "RunnerReady")
          ? true
          : undefined;
      },
      { timeoutMs: 120_000, what: "the demo instance to become ready" },
    );
    say(`
Local cluster ready: ${n} node(s), model ${MODEL_ID} placed.
The demo model is a 1 MB model with random weights, generated here: it answers gibberish. It
proves the path (placement, engine, gateway), not the answers. To serve a real model, copy its
GGUF into ${modelDirHint(store)} and place it (docs/operations.md, "The local cluster").
Base URL: ${base}
Dashboard: ${base}/

  curl -s ${base}/state | head -c 600; echo
  curl -s ${base}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"${MODEL_ID}","messages":[{"role":"user","content":"Hello!"}],"max_tokens":16}'

${await logLocations(nodes)}
Press Ctrl-C to stop.`);
  } catch (e) {
    complain(`local cluster failed: ${e instanceof Error ? e.message : String(e)}`);
    for (const node of nodes)
      complain(
        `--- last log lines of ${node.spec.name} ---\n${node.logLines.slice(-15).join("\n")}`,
      );
    await stopAll();
    return 1;
  }
  return await new Promise<number>(() => {
    // Runs until Ctrl-C (onSignal exits).
  });
}

/**
 * Where each node's and runner's logs are: a node's own lines over its API (in-memory tail; the
 * terminal with --verbose), each runner's file under its node's runner_log_dir (also over any API).
 */
async function logLocations(nodes: readonly NodeProcess[]): Promise<string> {
  const out = ["Logs:"];
  for (const node of nodes)
    out.push(
      `  ${node.spec.name}: ${node.spec.logFile ?? "(in memory)"}  (also: curl -s '${node.apiUrl}/logs?tail=100')`,
      `    runner logs: ${join(node.dataDir, "runners")}/<instance>-rank<n>.log`,
    );
  const s = await nodes[0]!.get<{
    node_identities: { node_id: string; name: string }[];
    instances: { instance_id: string; assignments: { node_id: string; rank: number }[] }[];
  }>("/state");
  for (const inst of s.instances)
    for (const a of inst.assignments) {
      const name = s.node_identities.find((m) => m.node_id === a.node_id)?.name;
      const holder = nodes.find((x) => x.spec.name === name);
      if (!holder) continue;
      out.push(
        `  ${inst.instance_id} rank ${a.rank} on ${name}: ${join(holder.dataDir, "runners", `${inst.instance_id}-rank${a.rank}.log`)}`,
        `    curl -s '${nodes[0]!.apiUrl}/instances/${inst.instance_id}/logs?rank=${a.rank}&tail=50&format=text'`,
      );
    }
  return `${out.join("\n")}\n`;
}
