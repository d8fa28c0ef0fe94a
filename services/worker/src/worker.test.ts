import { afterEach, describe, expect, it, vi } from "vitest";
import { EngineSchema } from "@ic/config";
import { emptyState } from "@ic/protocol";
import type { Command, InstanceId, ModelId, ModelRecord, NodeId, Runner } from "@ic/protocol";
import { silentLogger } from "@ic/log";
import type { ClusterPort, StagingProgress } from "./ports.ts";
import { Registry } from "prom-client";
import { runnerMetrics } from "./metrics.ts";
import { Worker } from "./worker.ts";

const model: ModelRecord = {
  model_id: "demo/tiny" as ModelId,
  file: "tiny.gguf",
  bytes: 1_000_000,
  architecture: "llama",
  layers: 4,
  context_length: 2048,
  embedding_length: 64,
  head_count: 4,
  head_count_kv: 2,
  supports_tensor: true,
};

type Stage = ConstructorParameters<typeof Worker>[0]["stager"]["stage"];

/** A stage that stays in staging until aborted. */
const stageForever: Stage = (_m, signal) =>
  new Promise((_r, reject) => signal.addEventListener("abort", () => reject(new Error("aborted"))));

/**
 * A worker with one rank-0 runner assigned and a stager that stays in staging until aborted (or
 * does what `stage` does), once the first stage began.
 */
async function stagingWorker(stage: Stage = stageForever) {
  const state = emptyState();
  state.models[model.model_id] = model;
  state.instances["i-a"] = {
    instance_id: "i-a" as InstanceId,
    model_id: model.model_id,
    sharding: "Pipeline",
    created_at: 1,
    assignments: [
      { node_id: "n-1" as NodeId, peer_key: "p-1", rank: 0, weight_bytes: 1, required_bytes: 1 },
    ],
  };
  const commands: Command[] = [];
  const cluster: ClusterPort = {
    peerKey: "p-1",
    synced: true,
    nodeId: "n-1" as NodeId,
    snapshot: () => state,
    command: (cmd) => {
      commands.push(cmd);
      return Promise.resolve({ ok: true });
    },
    on: () => () => {},
  };
  let progress!: (p: StagingProgress) => void;
  let staged!: () => void;
  const staging = new Promise<void>((resolve) => (staged = resolve));
  const worker = new Worker({
    cluster,
    stager: {
      stage: (m, signal, onProgress) => {
        progress = onProgress!;
        staged();
        return stage(m, signal, onProgress);
      },
      setInUse: () => {},
      released: () => Promise.resolve(),
    },
    log: silentLogger(),
    engine: () => ({
      server_bin: "/x",
      rpc_bin: "/y",
      backend: "cpu",
      usable: true,
      overridden: false,
    }),
    host: "127.0.0.1",
    settings: EngineSchema.parse({
      runner_log_dir: "/tmp",
      context_size: 512,
      gpu_layers: 0,
      warmup_deadline_seconds: 1,
      restart_backoff_ms: 10,
      healthy_uptime_ms: 1000,
      niceness: 0,
      port_base: 40000,
    }),
  });
  worker.start();
  await staging;
  const reports = () =>
    commands.flatMap((c) => (c.type === "ReportRunner" ? [c.runner] : [])) as Runner[];
  return {
    worker,
    state,
    progress: (d: number) => progress({ doneBytes: d, totalBytes: model.bytes }),
    reports,
  };
}

afterEach(() => vi.useRealTimers());

describe("Worker runner reports", () => {
  it("reports staging progress at most once a second per runner", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(10_000);
    const w = await stagingWorker();
    try {
      const before = w.reports().length;
      expect(w.reports().at(-1)).toMatchObject({
        state: "RunnerStaging",
        progress: { staged_bytes: 0, total_bytes: 1_000_000, started_at: 10_000 },
      });
      for (let i = 1; i <= 20; i++) w.progress(i * 1000); // a burst within one second: one report
      vi.setSystemTime(10_500);
      w.progress(30_000);
      expect(w.reports().length - before).toBe(1);
      expect(w.reports().at(-1)?.progress?.staged_bytes).toBe(1000);
      vi.setSystemTime(11_001);
      w.progress(400_000);
      expect(w.reports().length - before).toBe(2);
      expect(w.reports().at(-1)).toMatchObject({
        state: "RunnerStaging",
        progress: { staged_bytes: 400_000, total_bytes: 1_000_000, started_at: 10_000 },
      });
      expect(w.reports().every((r) => r.warmup_started_at === undefined)).toBe(true);
    } finally {
      await w.worker.stop();
    }
  });

  it("stages again from where the store host is now: each retry reads the model's record afresh", async () => {
    const asked: (string | undefined)[] = [];
    let retried!: () => void;
    const second = new Promise<void>((r) => (retried = r));
    const w = await stagingWorker((m, signal, onProgress) => {
      asked.push(m.store_url);
      if (asked.length === 1) return Promise.reject(new Error("store at http://old unreachable"));
      retried();
      return stageForever(m, signal, onProgress);
    });
    try {
      // The store host came back on another address and registered the model there.
      w.state.models[model.model_id] = { ...model, store_url: "http://new" };
      await second;
      expect(asked).toEqual([undefined, "http://new"]);
      expect(w.reports().at(-1)?.reason).toMatch(/staging attempt 1 failed .*old unreachable/);
    } finally {
      await w.worker.stop();
    }
  });

  it("gives its metrics the staging runner's progress and restarts (what /metrics scrapes)", async () => {
    const w = await stagingWorker();
    try {
      w.progress(250_000);
      const registry = new Registry();
      runnerMetrics(registry, () => w.worker.runnerViews());
      const text = await registry.metrics();
      const labels = '{model="demo/tiny",ic_instance="i-a",rank="0"}';
      expect(text).toContain(`ic_runner_staged_bytes${labels} 250000`);
      expect(text).toContain(`ic_runner_stage_total_bytes${labels} 1000000`);
      expect(text).toContain(`ic_runner_restarts${labels} 0`);
    } finally {
      await w.worker.stop();
    }
  });
});
