// The local cluster of `npm start`: brings up N nodes on loopback, generates the tiny demo model into
// the first node's store, places it, and prints the base URL, a ready-to-paste curl and where every
// log is. Nodes run with the documented defaults; only names, ports and file locations are chosen here.
// Ctrl-C stops every node.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { ConfigError, loadConfig, readConfigFile } from "@ic/config";
import { writeTinyModel } from "@ic/gguf";
import type { Pull, PullBody } from "@ic/protocol";
import {
  newClusterSecret,
  prepareNode,
  waitForConvergence,
  withoutLauncherKeys,
} from "./node-process.ts";
import type { NodeProcess } from "./node-process.ts";
import { deathSignalAvailable, freePort, waitFor } from "@ic/process";
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

/** The operator's --config file, the launcher's own keys left out (with a line for each). */
function operatorConfig(file: string): Record<string, unknown> {
  const { kept, dropped } = withoutLauncherKeys(readConfigFile(file));
  for (const key of dropped)
    complain(`--config: ignoring ${key}: the local-cluster launcher sets it for every node`);
  return kept;
}

const refText = (m: PullBody) =>
  `${m.model_id}${m.quant ? `:${m.quant}` : ""}${m.revision ? `@${m.revision}` : ""}`;

/** Pulls the --model into the store through the first node, with a progress line now and then. */
async function pullModel(node: NodeProcess, model: PullBody, hubUrl: string): Promise<Pull> {
  say(`pulling ${refText(model)} from ${hubUrl} into the store...`);
  const r = await node.post("/store/pulls", model);
  if (!r.ok) {
    const body = (await r.json().catch(() => ({}))) as { error?: { message?: string } };
    throw new Error(`pulling ${refText(model)}: ${body.error?.message ?? `HTTP ${r.status}`}`);
  }
  let lastSaid = 0;
  for (;;) {
    const { pulls } = await node.get<{ pulls: Pull[] }>("/store/pulls");
    const p = pulls.find((x) => x.model_id === model.model_id);
    if (!p) throw new Error(`the store host lost the pull of ${model.model_id}`);
    if (p.state === "done") return p;
    if (p.state === "failed" || p.state === "cancelled")
      throw new Error(`the pull of ${refText(model)} ${p.state}: ${p.error?.message ?? ""}`);
    if (Date.now() - lastSaid > 5000 && p.bytes_total) {
      lastSaid = Date.now();
      const pct = Math.floor((100 * p.bytes_done) / Math.max(1, p.bytes_total));
      say(`  ${p.quant ?? ""} ${pct}% of ${(p.bytes_total / 1e6).toFixed(0)} MB`);
    }
    await new Promise((res) => setTimeout(res, 500));
  }
}

/** Runs the local cluster until a signal; resolves with an exit code only when starting failed. */
export async function runLocalCluster(o: StartOptions): Promise<number> {
  const { nodes: n, dataDir: root } = o;
  let userConfig: Record<string, unknown> = {};
  try {
    if (o.configFile) userConfig = operatorConfig(o.configFile);
  } catch (e) {
    complain(e instanceof Error ? e.message : String(e));
    return 2;
  }
  const store = await demoStore(root);
  const prepared = await prepareNodes(o, store, clusterSecretOf(root), userConfig);
  if (typeof prepared === "number") return prepared;
  const { nodes, hubUrl } = prepared;
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
    const first = nodes[0]!;
    const target = o.model?.model_id ?? MODEL_ID;
    const pulled = o.model ? await pullModel(first, o.model, hubUrl) : undefined;
    await placeModel(first, target, o.model ? 30 * 60_000 : 120_000);
    say(await readyMessage(nodes, n, store, { target, hubUrl, pulled }));
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

/** The first node's store, with the demo model generated in it on the first start. */
async function demoStore(root: string): Promise<string> {
  mkdirSync(root, { recursive: true });
  const store = join(root, "store");
  const modelDir = join(store, "demo--tiny-llama");
  mkdirSync(modelDir, { recursive: true });
  if (!existsSync(join(modelDir, "tiny-llama.gguf"))) {
    const m = await writeTinyModel(join(modelDir, "tiny-llama.gguf"));
    say(`generated the demo model ${MODEL_ID} (${m.bytes} bytes)`);
  }

  return store;
}

/** The local nodes share one cluster secret, made on first start and kept (mode 0600) for the next. */
function clusterSecretOf(root: string): string {
  const secretFile = join(root, "cluster.secret");
  if (!existsSync(secretFile))
    writeFileSync(secretFile, `${newClusterSecret()}\n`, { mode: 0o600 });
  const secret = readFileSync(secretFile, "utf8").trim();

  return secret;
}

/**
 * The local nodes' specs and config files, checked before anything starts (with tokens configured
 * the launcher uses an admin one); the exit code 2 when a config does not load.
 */
async function prepareNodes(
  o: StartOptions,
  store: string,
  secret: string,
  userConfig: Record<string, unknown>,
): Promise<{ nodes: NodeProcess[]; hubUrl: string } | number> {
  const { nodes: n, dataDir: root, verbose } = o;
  const basePort = o.port;
  const clusterPorts: number[] = [];
  for (let i = 0; i < n; i++) clusterPorts.push(await freePort());
  const nodes: NodeProcess[] = [];
  let hubUrl = "";
  for (let i = 0; i < n; i++) {
    const want = basePort + i;
    const apiPort = (await portFree(want)) ? want : 0;
    const spec = {
      name: `local-${i + 1}`,
      // The nodes live in sessions of their own (a Ctrl-C reaches the launcher, which stops them
      // in order); a launcher killed outright takes them with it, each draining as on SIGTERM.
      ...(deathSignalAvailable()
        ? { wrap: ["/usr/bin/setpriv", "--pdeathsig", "TERM", "--"] }
        : {}),
      clusterPort: clusterPorts[i]!,
      peers: clusterPorts.filter((_, j) => j !== i).map((p) => `127.0.0.1:${p}`),
      secret,
      dataDir: join(root, `node-${i + 1}`),
      verbose,
      logFile: join(root, `node-${i + 1}`, "node.log"),
      userConfig,
      config: {
        node: { api_port: apiPort },
        // Everything else keeps the documented defaults (timings, backoffs, limits) or what the
        // operator set; the context is capped by each model's own (the demo model's is 2048).
        ...(i === 0
          ? {
              store_path: store,
              node_overrides: {
                "local-1": { model_store: { staging: { cleanup_on_deactivate: false } } },
              },
            }
          : {}),
      },
    };
    let node = prepareNode(spec);
    // Checked before anything starts; with tokens configured the launcher uses an admin one.
    try {
      const cfg = loadConfig({ file: node.configPath });
      hubUrl ||= cfg.model_store.hub_url;
      if (cfg.auth.tokens.length > 0) {
        const admin = cfg.auth.tokens.find((t) => t.scopes.includes("admin"));
        if (!admin)
          throw new ConfigError(
            "auth.tokens: the launcher needs a token with the admin scope to place the model",
          );
        node = prepareNode({ ...spec, apiToken: admin.token });
      }
    } catch (e) {
      complain(
        `${join(root, `node-${i + 1}`, "config.yaml")}: ${e instanceof Error ? e.message : String(e)}`,
      );
      return 2;
    }
    nodes.push(node);
  }
  return { nodes, hubUrl };
}

/**
 * Waits for the model to be registered, places it unless the cluster keeps it already (a deployment
 * a data dir brought back, or an instance), waits for it to serve.
 */
async function placeModel(
  first: NodeProcess,
  target: string,
  readyTimeoutMs: number,
): Promise<void> {
  await waitFor(
    async () => {
      const s = await first.get<{ models: { model_id: string }[] }>("/state");
      return s.models.some((m) => m.model_id === target) ? true : undefined;
    },
    { timeoutMs: 30_000, what: `${target} to be registered` },
  );
  // A data dir started again brings its deployments back from the intent store, each without an
  // instance until it is placed again: placing the model before they are back doubled it.
  const state = await waitFor(
    async () => {
      const s = await first.get<{
        intent_restored: boolean;
        deployments: { model_id: string }[];
        instances: { model_id: string }[];
      }>("/state");
      return s.intent_restored ? s : undefined;
    },
    { timeoutMs: 30_000, what: "the cluster to restore its deployments" },
  );
  const kept = [...state.deployments, ...state.instances].some((d) => d.model_id === target);
  if (!kept) {
    const r = await first.post("/place_instance", {
      model_id: target,
      min_nodes: 1,
      excluded_nodes: [],
    });
    if (!r.ok) throw new Error(`placing ${target} failed: ${r.status} ${await r.text()}`);
  }
  await waitFor(
    async () => {
      const body = await first.get<{ data: { id: string }[] }>("/v1/models");
      if (!body.data.some((m) => m.id === target)) return undefined;
      const s = await first.get<{
        instances: { model_id: string; runners: { rank: number; state: string }[] }[];
      }>("/state");
      const inst = s.instances.find((i) => i.model_id === target);
      return inst?.runners.some((r0) => r0.rank === 0 && r0.state === "RunnerReady")
        ? true
        : undefined;
    },
    // A real model may take minutes to stage and load on a small machine.
    {
      timeoutMs: readyTimeoutMs,
      what: `the ${target} instance to become ready`,
    },
  );
}

/** The model the cluster serves: its id, and its pull from the hub at `hubUrl` (demo: none). */
interface ServedModel {
  target: string;
  hubUrl: string;
  pulled: Awaited<ReturnType<typeof pullModel>> | undefined;
}

/** What the operator reads once the cluster serves: the model, the base URL, two commands, logs. */
async function readyMessage(
  nodes: readonly NodeProcess[],
  n: number,
  store: string,
  { target, hubUrl, pulled }: ServedModel,
): Promise<string> {
  const first = nodes[0]!;
  const base = first.apiUrl;
  const auth = first.authHeaders.authorization
    ? ` -H 'authorization: ${first.authHeaders.authorization.replace(/\S+$/, "<token>")}'`
    : "";
  const about = pulled
    ? `Pulled ${target}${pulled.quant ? ` (${pulled.quant}, the engine loads ${pulled.served_file ?? "its GGUF"})` : ""} from ${hubUrl}.`
    : `The demo model is a 1 MB model with random weights, generated here: it answers gibberish. It
proves the path (placement, engine, gateway), not the answers. To serve a real small model:
  npm start -- --model Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M
or copy a GGUF into ${modelDirHint(store)} and place it (docs/models.md).`;
  return `
Local cluster ready: ${n} node(s), model ${target} placed.
${about}
Base URL: ${base}
Dashboard: ${base}/

  curl -s ${base}/state${auth} | head -c 600; echo
  curl -s ${base}/v1/chat/completions${auth} -H 'content-type: application/json' \\
    -d '{"model":"${target}","messages":[{"role":"user","content":"Hello!"}],"max_tokens":16}'

${await logLocations(nodes)}
Press Ctrl-C to stop.`;
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
