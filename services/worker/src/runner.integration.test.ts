import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { afterAll, describe, expect, it } from "vitest";
import { EngineSchema } from "@ic/config";
import { writeTinyModel } from "@ic/gguf";
import { locateEngine } from "@ic/engine";
import { createLogger } from "@ic/log";
import { fixturePath, freePort, waitFor } from "@ic/testkit";
import { RunnerSupervisor } from "./runner.ts";
import type { RunnerSpec, RunnerStatus } from "./runner.ts";
import { serverArgs } from "./args.ts";
import type { Instance, InstanceId, ModelId, NodeId } from "@ic/protocol";

function capturingLogger() {
  const out = new PassThrough();
  const lines: string[] = [];
  out.on("data", (c: Buffer) => lines.push(...c.toString().split("\n").filter(Boolean)));
  return { log: createLogger({ enabled: true, destination: out }), lines };
}

const inst: Instance = {
  instance_id: "i-test" as InstanceId,
  model_id: "test/tiny" as ModelId,
  sharding: "Pipeline",
  created_at: 0,
  assignments: [
    {
      node_id: "n" as NodeId,
      peer_key: "p",
      rank: 0,
      layers: 4,
      weight_bytes: 1,
      required_bytes: 1,
    },
  ],
};

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

async function realSpec(over: Partial<RunnerSpec> = {}): Promise<RunnerSpec> {
  const dir = mkdtempSync(join(tmpdir(), "runner-"));
  dirs.push(dir);
  const model = await writeTinyModel(join(dir, "tiny.gguf"));
  const engine = await locateEngine();
  const port = await freePort();
  return {
    instanceId: "i-test",
    rank: 0,
    role: "server",
    bin: engine.server_bin!,
    args: serverArgs({
      instance: inst,
      modelPath: model.path,
      host: "127.0.0.1",
      port,
      contextSize: 256,
      engine: EngineSchema.parse({ gpu_layers: 0 }),
      totalLayers: 4,
      rpcEndpoints: [],
      localGpus: [],
      tensorMode: "tensor",
    }),
    host: "127.0.0.1",
    port,
    warmupDeadlineMs: 30_000,
    restartBackoffMs: 100,
    healthyUptimeMs: 60_000,
    maxCrashes: 5,
    logFile: join(dir, "runner.log"),
    ...over,
  };
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("RunnerSupervisor with the real llama-server", () => {
  it("becomes ready, is restarted after being killed, serves again, and leaves no process after stop", async () => {
    const { log, lines } = capturingLogger();
    const states: RunnerStatus[] = [];
    const spec = await realSpec();
    const sup = new RunnerSupervisor(spec, log, (s) => states.push(s));
    sup.start();
    await waitFor(() => (sup.current.state === "RunnerReady" ? true : undefined), {
      timeoutMs: 30_000,
      what: "ready",
    });
    const pid1 = sup.current.pid!;
    process.kill(pid1, "SIGKILL");
    await waitFor(
      () => (sup.current.state === "RunnerReady" && sup.current.pid !== pid1 ? true : undefined),
      { timeoutMs: 30_000, what: "restart" },
    );
    expect(sup.current.restarts).toBe(1);
    const r = await fetch(`${sup.endpoint}/health`);
    expect(r.status).toBe(200);
    const pid2 = sup.current.pid!;
    await sup.stop();
    expect(pidAlive(pid2)).toBe(false);
    expect(sup.current.state).toBe("RunnerStopped");
    // Both runs wrote straight into the same file, and the restart message quotes its tail.
    const text = readFileSync(spec.logFile, "utf8");
    expect(text.match(/listening on http/g)?.length).toBe(2);
    const restart = lines
      .map((l) => JSON.parse(l) as { msg: string; log_tail?: string[]; log_file?: string })
      .find((l) => l.msg === "runner exited; restarting");
    expect(restart?.log_file).toBe(spec.logFile);
    expect(restart?.log_tail?.join("\n")).toMatch(/listening on http/);
    expect(states.map((s) => s.state)).toContain("RunnerWarmingUp");
  });

  it("a slow engine past a short warmup deadline ends in RunnerFailed with the CRITICAL diagnosis", async () => {
    const { log, lines } = capturingLogger();
    const spec = await realSpec({ bin: fixturePath("slow-engine.sh"), warmupDeadlineMs: 1000 });
    const sup = new RunnerSupervisor(spec, log, () => {});
    sup.start();
    await waitFor(() => (sup.current.state === "RunnerFailed" ? true : undefined), {
      timeoutMs: 10_000,
      what: "RunnerFailed",
    });
    expect(sup.current.reason).toBe("warmup exceeded its deadline");
    const critical = lines
      .map((l) => JSON.parse(l) as { level: number; msg: string })
      .find((l) => l.msg.startsWith("CRITICAL"));
    expect(critical?.level).toBe(60);
    expect(critical?.msg).toMatch(/reboot the machine/);
    // No restart after a deadline: still failed a moment later.
    await new Promise((r) => setTimeout(r, 500));
    expect(sup.current.state).toBe("RunnerFailed");
    await sup.stop();
  });
});
