// The GPU check: one command on a machine with an NVIDIA GPU and no network (bench/gpu/run.sh brings
// node, nats-server and the engine source along). It builds the engine with the project's own
// script, probes what the engine can split across nodes, starts a local cluster of one node and then
// two, and checks GPU telemetry, VRAM counting, full offload, a chat completion, a 2-node Pipeline
// over ggml-rpc on the GPU, Tensor across nodes (served when the probe allows it, else refused with
// tensor_unsupported and nothing started) and Tensor within a node (two GPUs or more), then runs
// bench/gateway. On a CPU machine it runs the CPU points and says why the others were skipped
// (plan.ts). Writes "## GPU check (bench/gpu)" with the engine's own log lines as evidence.
// Usage: npm run bench gpu   (GPU_CHECK_BUDGET_S: whole run, default 480; OUT: also copy there)
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { locateEngine, managedBuild, probeCacheRoot, probeSplitSupport } from "@ic/engine";
import { placeAndWait, seedStore, startCluster, waitForConvergence } from "@ic/testkit";
import { splitProbeCommands } from "@ic/worker";
import type { LocalCluster, NodeProcess } from "@ic/testkit";
import { nvidiaGpus } from "../lib/gpus.ts";
import { machineLine, REPO_ROOT, writeSection } from "../lib/report.ts";
import { gpuCheckPlan } from "./plan.ts";
import type { CheckId, Inventory } from "./plan.ts";

const T0 = Date.now();
const BUDGET_MS = Number(process.env.GPU_CHECK_BUDGET_S ?? 480) * 1000;
const left = () => BUDGET_MS - (Date.now() - T0);
const MODEL = "test/tiny-llama";
/**
 * Tensor across nodes runs with flash attention (llama.cpp requires it for `-sm tensor`), and CUDA
 * has no flash-attention kernel for the tiny model's 16-dimension heads: this one has 64.
 */
const WIDE = "test/wide-llama";

type Outcome = { result: "pass" | "fail" | "skip"; evidence: string[] };
const outcomes = new Map<CheckId, Outcome>();
const say = (s: string) =>
  console.log(`[gpu-check +${((Date.now() - T0) / 1000).toFixed(0)}s] ${s}`);
function record(id: CheckId, ok: boolean, evidence: string[]): void {
  outcomes.set(id, { result: ok ? "pass" : "fail", evidence });
  say(`${id}: ${ok ? "PASS" : "FAIL"} ${evidence[0] ?? ""}`);
}

function inventory(): Inventory {
  const cuda = ["/usr/local/cuda/bin", "/usr/local/cuda-13.0/bin", "/usr/local/cuda-12/bin"];
  for (const d of cuda)
    if (existsSync(join(d, "nvcc")) && !process.env.PATH?.includes(d))
      process.env.PATH = `${process.env.PATH}:${d}`;
  const gpus = nvidiaGpus().map((g) => ({ name: g.name, vramMiB: g.totalMiB }));
  const nvcc = spawnSync("sh", ["-c", "command -v nvcc"], { encoding: "utf8" }).status === 0;
  return { gpus, nvcc };
}

/** Lines of `text` matching `re`, at most `n`, trimmed of llama.cpp's timestamps. */
function grep(text: string, re: RegExp, n = 4): string[] {
  return text
    .split("\n")
    .filter((l) => re.test(l))
    .slice(0, n)
    .map((l) =>
      l
        .replace(/^[\d.]+ [A-Z] /, "")
        .trim()
        .slice(0, 220),
    );
}

const runnerLog = (n: NodeProcess, instance: string, rank: number) => {
  const f = join(n.dataDir, "runners", `${instance}-rank${rank}.log`);
  return existsSync(f) ? readFileSync(f, "utf8") : "";
};

/** The last lines of every runner log of a node (what to read when a step failed). */
function runnerTails(n: NodeProcess): string {
  const dir = join(n.dataDir, "runners");
  if (!existsSync(dir)) return "(no runner logs)";
  return readdirSync(dir)
    .filter((f) => f.endsWith(".log"))
    .map((f) => `${f}:\n${readFileSync(join(dir, f), "utf8").split("\n").slice(-12).join("\n")}`)
    .join("\n");
}

async function chat(n: NodeProcess, model = MODEL): Promise<{ status: number; text: string }> {
  const r = await n.post("/v1/chat/completions", {
    model,
    messages: [{ role: "user", content: "Tell me about GPUs." }],
    max_tokens: 8,
    temperature: 0,
  });
  const body = (await r.json()) as { choices?: { message?: { content?: string } }[] };
  return { status: r.status, text: JSON.stringify(body.choices?.[0]?.message?.content ?? body) };
}

interface StateDoc {
  node_identities: { node_id: string; name: string }[];
  topology: {
    nodes: {
      telemetry: {
        memory_total_bytes: number;
        gpus: { model: string; vram_total_bytes: number | null }[];
        engine: { backend: string };
      } | null;
    }[];
  };
  instances: { instance_id: string }[];
}

type Built = NonNullable<ReturnType<typeof managedBuild>>;
type ProbeSettings = Parameters<typeof splitProbeCommands>[0];
type Runs = (id: CheckId) => boolean;
type NodeConfig = (i: number) => Record<string, unknown>;
type Telemetry = StateDoc["topology"]["nodes"][number]["telemetry"];

/** 1. The engine, built by the project's own script (cached per bundle commit). */
function buildEngine(inv: Inventory, work: string): Built | null {
  const buildLog = join(work, "engine-build.log");
  const t = Date.now();
  const b = spawnSync(process.execPath, [join(REPO_ROOT, "scripts/build-engine.mjs")], {
    encoding: "utf8",
    timeout: Math.max(60_000, left() - 150_000),
  });
  writeFileSync(buildLog, `${b.stdout ?? ""}${b.stderr ?? ""}`);
  const built = managedBuild();
  const wantCuda = inv.gpus.length > 0 && inv.nvcc;
  record(
    "engine-build",
    b.status === 0 && built !== null && (!wantCuda || built.backend === "cuda"),
    [
      `exit ${b.status}, ${((Date.now() - t) / 1000).toFixed(0)} s, backend ${built?.backend ?? "none"}, commit ${built?.commit.slice(0, 12) ?? "?"}`,
      ...grep(`${b.stdout}${b.stderr}`, /built in|CUDA|error/i, 3),
    ],
  );
  return built;
}

/** 2. What the engine can split across nodes; whether Tensor across nodes should be served. */
async function probeEngine(
  built: Built,
  settings: ProbeSettings,
): Promise<{ optIn: boolean; tensorAllowed: boolean }> {
  const engine = await locateEngine();
  // The node's probe: the runner's command lines with the check's engine settings.
  const split = await probeSplitSupport(engine, {
    cacheDir: probeCacheRoot(),
    commands: splitProbeCommands(settings, engine.backend),
  });
  record("engine-probe", true, [
    `row over rpc: ${split.row_over_rpc}, tensor over rpc: ${split.tensor_over_rpc}`,
    split.evidence,
  ]);
  // The experimental -sm tensor mode is off unless the operator allows it
  // (engine.experimental_tensor_split); GPU_CHECK_TENSOR_OPT_IN=1 allows it on the check's nodes.
  const optIn = process.env.GPU_CHECK_TENSOR_OPT_IN === "1";
  const tensorAllowed =
    (split.row_over_rpc || (split.tensor_over_rpc && optIn)) &&
    (built.backend === "cuda" || built.backend === "metal");
  return { optIn, tensorAllowed };
}

/** GPU telemetry and VRAM counting, from a node's reported telemetry against nvidia-smi. */
function telemetryChecks(tel: Telemetry | undefined, inv: Inventory, runs: Runs): void {
  if (runs("gpu-telemetry"))
    record("gpu-telemetry", (tel?.gpus.length ?? 0) >= 1, [
      `GPUs reported: ${tel?.gpus.map((g) => `${g.model} ${((g.vram_total_bytes ?? 0) / 2 ** 30).toFixed(1)} GiB`).join(", ")}`,
    ]);
  if (runs("vram-counting")) {
    const vram = inv.gpus.reduce((s, g) => s + g.vramMiB * 2 ** 20, 0);
    const total = tel?.memory_total_bytes ?? 0;
    record("vram-counting", tel?.engine.backend === "cuda" && Math.abs(total - vram) / vram < 0.1, [
      `placement counts ${(total / 2 ** 30).toFixed(1)} GiB (nvidia-smi: ${(vram / 2 ** 30).toFixed(1)} GiB VRAM), engine backend ${tel?.engine.backend}`,
    ]);
  }
}

/** Tensor within a node: placed with sharding Tensor, run with -sm row, and it answers. */
async function tensorWithinNode(n: NodeProcess): Promise<void> {
  const r = await n.post("/place_instance", {
    model_id: MODEL,
    min_nodes: 1,
    sharding: "Tensor",
  });
  const body = (await r.json()) as { instance?: { instance_id: string } };
  const id = body.instance?.instance_id ?? "";
  await new Promise((res) => setTimeout(res, 15_000));
  const args = n.logLines.find((l) => l.includes(id) && l.includes("-sm"));
  const c2 = await chat(n);
  record(
    "tensor-within-node",
    r.status === 200 && /-sm","row","-ts/.test(args ?? "") && c2.status === 200,
    [
      `place ${r.status}; runner args ${(args ?? "not found").slice(0, 200)}`,
      ...grep(runnerLog(n, id, 0), /CUDA[01] model buffer|split/),
    ],
  );
}

/** 3. One node: telemetry, VRAM counting, full offload, a chat, Tensor within the node. */
async function oneNode(config: NodeConfig, inv: Inventory, runs: Runs): Promise<void> {
  let one: LocalCluster | undefined;
  try {
    one = await startCluster(1, { config });
    const n = one.nodes[0]!;
    await waitForConvergence(one.nodes, 1, 60_000);
    const inst = await placeAndWait(n, { model_id: MODEL, min_nodes: 1 }, 120_000);
    const doc = await n.get<StateDoc>("/state");
    const tel = doc.topology.nodes[0]?.telemetry;
    telemetryChecks(tel, inv, runs);
    const log0 = runnerLog(n, inst.instance_id, 0);
    if (runs("full-offload")) {
      const m = /offloaded (\d+)\/(\d+) layers to GPU/.exec(log0);
      record("full-offload", m !== null && m[1] === m[2] && /CUDA0 model buffer/.test(log0), [
        ...grep(log0, /offloaded \d+\/\d+ layers|CUDA0 model buffer|using device CUDA/),
      ]);
    }
    const c = await chat(n);
    record("chat", c.status === 200, [`200 expected, got ${c.status}: ${c.text.slice(0, 120)}`]);
    if (runs("tensor-within-node")) await tensorWithinNode(n);
  } catch (e) {
    say(`one-node part failed: ${e instanceof Error ? e.message : String(e)}`);
    for (const n of one?.nodes ?? []) say(`${n.spec.name} runner logs:\n${runnerTails(n)}`);
  } finally {
    await one?.stop();
  }
}

/** Tensor across nodes: served where the probe allows it, else refused with nothing started. */
async function tensorAcrossNodes(
  n1: NodeProcess,
  n2: NodeProcess,
  tensorAllowed: boolean,
): Promise<void> {
  const before = (await n1.get<StateDoc>("/state")).instances.length;
  // The wide model: its heads have 64 dimensions, which CUDA's flash attention (required by the
  // tensor mode) has kernels for; the tiny model's 16 would abort its ranks whatever the split.
  const r = await n1.post("/place_instance", {
    model_id: WIDE,
    min_nodes: 2,
    sharding: "Tensor",
  });
  const body = (await r.json()) as {
    instance?: { instance_id: string };
    error?: { code: string; message: string };
  };
  if (tensorAllowed) {
    let served = false;
    let log = "";
    if (r.status === 200 && body.instance) {
      const id = body.instance.instance_id;
      for (let i = 0; i < 120 && !served; i++) {
        await new Promise((res) => setTimeout(res, 500));
        log = runnerLog(n1, id, 0) || runnerLog(n2, id, 0);
        if (/listening on/.test(log)) served = (await chat(n1, WIDE)).status === 200;
      }
    }
    const last = served ? [] : log.split("\n").filter(Boolean).slice(-3);
    record("tensor-across-nodes", r.status === 200 && served, [
      `the probe allows it: place ${r.status}, served ${served}`,
      ...grep(log, /Meta\(\) model buffer|SPLIT_MODE_TENSOR|RPC\d|CUDA0 model buffer/),
      ...last.map((l) => `last: ${l.slice(0, 200)}`),
    ]);
  } else {
    await new Promise((res) => setTimeout(res, 1000));
    const after = (await n1.get<StateDoc>("/state")).instances.length;
    record(
      "tensor-across-nodes",
      r.status === 400 && body.error?.code === "tensor_unsupported" && after === before,
      [
        `refused as the probe says: ${r.status} ${body.error?.code}: ${body.error?.message ?? ""}`.slice(
          0,
          400,
        ),
        `instances before ${before}, after ${after}`,
      ],
    );
  }
}

/** 4. Two nodes: Pipeline over rpc, and Tensor across nodes. */
async function twoNodes(config: NodeConfig, built: Built, tensorAllowed: boolean): Promise<void> {
  let two: LocalCluster | undefined;
  try {
    two = await startCluster(2, { config });
    const [n1, n2] = two.nodes as [NodeProcess, NodeProcess];
    await waitForConvergence(two.nodes, 2, 60_000);
    const pipe = await placeAndWait(n1, { model_id: MODEL, min_nodes: 2 }, 120_000);
    const rank0 = runnerLog(n1, pipe.instance_id, 0) || runnerLog(n2, pipe.instance_id, 0);
    const rank1 = runnerLog(n1, pipe.instance_id, 1) || runnerLog(n2, pipe.instance_id, 1);
    const c = await chat(n2);
    const gpu = built.backend === "cuda";
    record(
      "pipeline-rpc",
      c.status === 200 && /RPC0\[.*model buffer/.test(rank0) && (!gpu || /CUDA/.test(rank1)),
      [
        `chat through node-2: ${c.status}`,
        ...grep(rank0, /RPC0\[.*model buffer|CUDA0 model buffer|CPU_Mapped model buffer/),
        ...grep(rank1, /CUDA|backend|device/, 2).map((l) => `rpc server: ${l}`),
      ],
    );
    await tensorAcrossNodes(n1, n2, tensorAllowed);
  } catch (e) {
    say(`two-node part failed: ${e instanceof Error ? e.message : String(e)}`);
    for (const n of two?.nodes ?? []) say(`${n.spec.name} runner logs:\n${runnerTails(n)}`);
  } finally {
    await two?.stop();
  }
}

/** bench/gateway with the wide model and short rounds, killed after `budget` ms; its exit code. */
function runGatewayBench(report: string, budget: number): Promise<number | null> {
  return new Promise<number | null>((resolve) => {
    const p = spawn(
      process.execPath,
      ["--import", "tsx", join(REPO_ROOT, "bench/gateway/main.ts")],
      {
        env: {
          ...process.env,
          BENCH_MODEL: "wide",
          BENCH_REPORT: report,
          BENCH_WARMUP: "60",
          BENCH_ROUNDS_1: "15",
          BENCH_ROUNDS_16: "5",
          BENCH_PASSES: "2",
        },
        stdio: ["ignore", "inherit", "inherit"],
      },
    );
    const timer = setTimeout(() => p.kill("SIGKILL"), budget);
    p.on("exit", (c) => {
      clearTimeout(timer);
      resolve(c);
    });
  });
}

/** 5. The gateway benchmark, short rounds, in what time is left. */
async function gatewayBench(work: string, runs: Runs): Promise<void> {
  if (process.env.GPU_CHECK_SKIP_BENCH === "1")
    outcomes.set("gateway-bench", { result: "skip", evidence: ["GPU_CHECK_SKIP_BENCH=1"] });
  else if (runs("gateway-bench")) {
    const report = join(work, "gateway.md");
    const budget = Math.min(200_000, left() - 10_000);
    if (budget < 60_000) {
      outcomes.set("gateway-bench", {
        result: "skip",
        evidence: [`${(left() / 1000).toFixed(0)} s left of the budget`],
      });
    } else {
      const code = await runGatewayBench(report, budget);
      const md = existsSync(report) ? readFileSync(report, "utf8") : "";
      // The figures (one row per concurrency and path, then gateway against the floor) and whether
      // the targets were met: a run that finished but missed them is not a pass.
      const missed = /not met in this run/.test(md);
      record("gateway-bench", code === 0 && md !== "" && !missed, [
        `exit ${code}${missed ? "; the gateway's targets against the floor were not met (bench/gateway states them: issue 32's at concurrency 1, issue 48's at 16)" : ""}`,
        ...grep(md, /^\| [^|]+ \| (1|16) \| /, 12).map((l) => {
          const [c, ...cells] = l
            .split("|")
            .slice(2, -1)
            .map((x) => x.trim() || "–");
          return `c=${c} · ${cells.join(" · ")}`;
        }),
      ]);
    }
  }
}

/** The summary: a row per check of the plan, written as the GPU check's section (and to OUT). */
async function summary(inv: Inventory, plan: ReturnType<typeof gpuCheckPlan>): Promise<void> {
  const rows = plan.map((c) => {
    const o = outcomes.get(c.id) ?? {
      result: "fail",
      evidence: ["did not run (an earlier step failed)"],
    };
    return `| ${c.title} | ${o.result.toUpperCase()} | ${o.evidence.map((e) => e.replaceAll("|", "/")).join("<br>")} |`;
  });
  const body = [
    `\`npm run bench gpu\` (bench/gpu/run.sh on a machine without node or network): ${inv.gpus.map((g) => `${g.name} (${(g.vramMiB / 1024).toFixed(0)} GiB)`).join(", ") || "no GPU"}, nvcc ${inv.nvcc ? "present" : "absent"}, ${((Date.now() - T0) / 1000).toFixed(0)} s in all, engine build included. ${machineLine()}.`,
    "",
    "| check | result | evidence (the engine's own lines where it has them) |",
    "| --- | --- | --- |",
    ...rows,
  ].join("\n");
  console.log(body);
  const title =
    inv.gpus.length > 0
      ? `GPU check (bench/gpu): ${inv.gpus[0]!.name}`
      : "GPU check (bench/gpu): CPU only";
  await writeSection(title, body);
  if (process.env.OUT)
    writeFileSync(join(process.env.OUT, "gpu-summary.md"), `## ${title}\n\n${body}\n`);
  const failed = plan.filter((c) => (outcomes.get(c.id)?.result ?? "fail") === "fail").length;
  say(`${failed} check(s) failed`);
  process.exitCode = failed > 0 ? 1 : 0;
}

async function main(): Promise<void> {
  const inv = inventory();
  const plan = gpuCheckPlan(inv);
  const runs = (id: CheckId) => !plan.find((c) => c.id === id)?.skip;
  for (const c of plan) if (c.skip) outcomes.set(c.id, { result: "skip", evidence: [c.skip] });
  say(
    `GPUs: ${inv.gpus.map((g) => `${g.name} ${g.vramMiB} MiB`).join(", ") || "none"}; nvcc: ${inv.nvcc}`,
  );

  const work = mkdtempSync(join(tmpdir(), "gpu-check-"));
  const built = buildEngine(inv, work);
  if (!built) return;
  const engine = { gpu_layers: 999, context_size: 2048 };
  const { optIn, tensorAllowed } = await probeEngine(built, { ...engine, extra_args: [] });

  const store = mkdtempSync(join(tmpdir(), "gpu-check-store-"));
  await seedStore(store, { modelId: MODEL });
  await seedStore(store, { modelId: WIDE, slow: true });
  const config = (i: number) => ({
    ...(i === 0 ? { store_path: store } : {}),
    engine: { ...engine, experimental_tensor_split: optIn },
  });

  await oneNode(config, inv, runs);
  await twoNodes(config, built, tensorAllowed);
  await gatewayBench(work, runs);
  await summary(inv, plan);
}

await main();
