import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { EngineSchema } from "@ic/config";
import { engineEnvironment, logTail, nextRunnerAction } from "./runner.ts";
import { rpcArgs, serverArgs } from "./args.ts";
import { runnerContext } from "./slot.ts";
import type { Instance, InstanceId, ModelId, NodeId } from "@ic/protocol";

const spec = { restartBackoffMs: 1000, healthyUptimeMs: 60_000, maxCrashes: 5 };
const half = () => 0.5;

describe("nextRunnerAction", () => {
  it("restarts a crash with exponential backoff", () => {
    expect(
      nextRunnerAction({ kind: "crashed", code: 1, signal: undefined }, 0, spec, half),
    ).toEqual({ action: "restart", delayMs: 1000, crashes: 1 });
    expect(
      nextRunnerAction({ kind: "crashed", code: 1, signal: undefined }, 2, spec, half),
    ).toEqual({ action: "restart", delayMs: 4000, crashes: 3 });
  });
  it("jitters the delay within +-20%", () => {
    expect(
      nextRunnerAction({ kind: "crashed", code: 1, signal: undefined }, 0, spec, () => 0),
    ).toMatchObject({ delayMs: 800 });
    expect(
      nextRunnerAction({ kind: "crashed", code: 1, signal: undefined }, 0, spec, () => 1),
    ).toMatchObject({ delayMs: 1200 });
  });
  it("resets the backoff after a healthy uptime", () => {
    expect(
      nextRunnerAction(
        { kind: "exited", code: 139, signal: undefined, uptimeMs: 120_000 },
        4,
        spec,
        half,
      ),
    ).toEqual({ action: "restart", delayMs: 1000, crashes: 1 });
    expect(
      nextRunnerAction(
        { kind: "exited", code: 139, signal: undefined, uptimeMs: 10 },
        1,
        spec,
        half,
      ),
    ).toEqual({ action: "restart", delayMs: 2000, crashes: 2 });
  });
  it("fails after too many crashes in a row, and on a warmup deadline without restarting", () => {
    expect(
      nextRunnerAction({ kind: "crashed", code: 1, signal: undefined }, 5, spec, half),
    ).toMatchObject({ action: "fail" });
    expect(nextRunnerAction({ kind: "deadline" }, 0, spec, half)).toEqual({
      action: "fail",
      reason: "warmup exceeded its deadline",
    });
  });
  it("does nothing after a requested stop", () => {
    expect(nextRunnerAction({ kind: "stopped" }, 3, spec, half)).toEqual({ action: "none" });
  });
});

function instance(nodes: number, sharding: "Pipeline" | "Tensor", layers: number[]): Instance {
  return {
    instance_id: "i-1" as InstanceId,
    model_id: "org/m" as ModelId,
    sharding,
    created_at: 0,
    assignments: Array.from({ length: nodes }, (_, rank) => ({
      node_id: `n${rank}` as NodeId,
      peer_key: `p${rank}`,
      rank,
      ...(sharding === "Pipeline" ? { layers: layers[rank]! } : { fraction: 1 / nodes }),
      weight_bytes: 1,
      required_bytes: 1,
    })),
  };
}
const base = {
  modelPath: "/s/m.gguf",
  host: "127.0.0.1",
  port: 9000,
  contextSize: 512,
  engine: EngineSchema.parse({ gpu_layers: 999 }),
  rpcEndpoints: [] as string[],
  localGpus: [] as number[],
  tensorMode: "tensor" as const,
};

describe("serverArgs", () => {
  it("single node: explicit host, port, context, -fit off, metrics, -ngl, alias", () => {
    const a = serverArgs({ ...base, instance: instance(1, "Pipeline", [4]), totalLayers: 4 });
    expect(a.join(" ")).toBe(
      "-m /s/m.gguf --alias org/m --host 127.0.0.1 --port 9000 -c 512 -fit off --metrics --no-webui -lv 4 -ngl 999",
    );
  });
  it("with TLS: the node's certificate and key files (paths only; the key stays in its file)", () => {
    const a = serverArgs({
      ...base,
      instance: instance(1, "Pipeline", [4]),
      totalLayers: 4,
      tls: { certFile: "/s/n.crt", keyFile: "/s/n.key" },
    });
    expect(a.join(" ")).toContain("--ssl-key-file /s/n.key --ssl-cert-file /s/n.crt");
  });
  it("where the engine moves KV caches: the instance's slot directory (none otherwise)", () => {
    const one = { ...base, instance: instance(1, "Pipeline", [4]), totalLayers: 4 };
    expect(serverArgs({ ...one, slotDir: "/r/kv/i-1" }).join(" ")).toContain(
      "--slot-save-path /r/kv/i-1",
    );
    expect(serverArgs(one)).not.toContain("--slot-save-path");
  });
  it("Pipeline over rpc on a CPU rank 0: remote layers offloaded in rank order, rank 0 keeps its own", () => {
    const a = serverArgs({
      ...base,
      instance: instance(3, "Pipeline", [2, 1, 1]),
      totalLayers: 4,
      rpcEndpoints: ["h1:1", "h2:2"],
    });
    expect(a.join(" ")).toContain("--rpc h1:1,h2:2 -sm layer -ngl 3 -ts 1,1");
  });
  it.each([
    {
      name: "Tensor across nodes on a GPU rank 0: the probed mode, rpc shares first, then the local GPU",
      nodes: 2,
      gpus: [8e9],
      mode: "tensor" as const,
      want: "--rpc h1:1 -sm tensor -ngl 5 -ts 0.5,0.5",
    },
    {
      name: "an engine that splits only by rows over rpc gets -sm row",
      nodes: 2,
      gpus: [8e9],
      mode: "row" as const,
      want: "--rpc h1:1 -sm row -ngl 5 -ts 0.5,0.5",
    },
    {
      name: "rank 0's share divided among its two local GPUs by free memory",
      nodes: 2,
      gpus: [6e9, 2e9],
      mode: "tensor" as const,
      want: "--rpc h1:1 -sm tensor -ngl 5 -ts 0.5,0.375,0.125",
    },
  ])("$name", ({ nodes, gpus, mode, want }) => {
    const a = serverArgs({
      ...base,
      instance: instance(nodes, "Tensor", []),
      totalLayers: 4,
      rpcEndpoints: ["h1:1"],
      localGpus: gpus,
      tensorMode: mode,
    });
    expect(a.join(" ")).toContain(want);
  });
  it("Tensor on one node: a row split across its local GPUs by free memory; nothing with one GPU or none", () => {
    const one = (gpus: number[]) =>
      serverArgs({
        ...base,
        instance: instance(1, "Tensor", []),
        totalLayers: 4,
        localGpus: gpus,
      }).join(" ");
    expect(one([24e9, 8e9])).toContain("-ngl 999 -sm row -ts 0.75,0.25");
    expect(one([24e9])).not.toContain("-sm");
    expect(one([])).not.toContain("-sm");
  });
  it("Pipeline on one node with several GPUs: whole layers spread by free memory, as placement counted", () => {
    const one = (gpus: number[]) =>
      serverArgs({
        ...base,
        instance: instance(1, "Pipeline", [4]),
        totalLayers: 4,
        localGpus: gpus,
      }).join(" ");
    expect(one([24e9, 8e9])).toContain("-ngl 999 -sm layer -ts 0.75,0.25");
    expect(one([24e9])).not.toContain("-sm");
  });
  it("Pipeline over rpc with two local GPUs: rank 0's layers divided among them", () => {
    const a = serverArgs({
      ...base,
      instance: instance(2, "Pipeline", [2, 2]),
      totalLayers: 4,
      rpcEndpoints: ["h1:1"],
      localGpus: [1e9, 1e9],
    });
    expect(a.join(" ")).toContain("--rpc h1:1 -sm layer -ngl 5 -ts 2,1,1");
  });
  it("a drafter adds -md with draft-simple speculation; vision weights add --mmproj", () => {
    const a = serverArgs({
      ...base,
      instance: instance(1, "Pipeline", [4]),
      totalLayers: 4,
      drafterPath: "/s/d.gguf",
      mmprojPath: "/s/mm.gguf",
    });
    expect(a.join(" ")).toContain(
      "-md /s/d.gguf -ngld 999 --spec-type draft-simple --mmproj /s/mm.gguf",
    );
  });
  it("an embedding instance runs with --embeddings and the model's pooling (mean by default)", () => {
    const emb = { ...instance(1, "Pipeline", [4]), embeddings: true };
    const a = serverArgs({ ...base, instance: emb, totalLayers: 4 });
    expect(a.join(" ")).toContain("--embeddings --pooling mean");
    const cls = serverArgs({ ...base, instance: emb, totalLayers: 4, pooling: "cls" });
    expect(cls.join(" ")).toContain("--embeddings --pooling cls");
    const chat = serverArgs({ ...base, instance: instance(1, "Pipeline", [4]), totalLayers: 4 });
    expect(chat).not.toContain("--embeddings");
    expect(chat).not.toContain("--reranking");
    // By kind: the same as the older field, and a reranking engine.
    const byKind = { ...instance(1, "Pipeline", [4]), kind: "embed" as const };
    expect(serverArgs({ ...base, instance: byKind, totalLayers: 4 }).join(" ")).toContain(
      "--embeddings --pooling mean",
    );
    const rerank = { ...instance(1, "Pipeline", [4]), kind: "rerank" as const };
    const r = serverArgs({ ...base, instance: rerank, totalLayers: 4 });
    expect(r).toContain("--reranking");
    expect(r).not.toContain("--embeddings");
  });
  it("engine.threads: -t before the operator's extra arguments (which win); unset: no -t", () => {
    const one = { ...base, instance: instance(1, "Pipeline", [4]), totalLayers: 4 };
    expect(serverArgs(one)).not.toContain("-t");
    const engine = EngineSchema.parse({ threads: 3, extra_args: ["-t", "5"] });
    expect(serverArgs({ ...one, engine }).join(" ")).toMatch(/ -t 3 -t 5$/);
    expect(rpcArgs("127.0.0.1", 50052, 3).join(" ")).toBe("-H 127.0.0.1 -p 50052 -t 3");
    expect(rpcArgs("127.0.0.1", 50052, undefined)).not.toContain("-t");
  });
});

describe("runnerContext", () => {
  it.each([
    ["what placement chose", 65_536, undefined, 131_072, 65_536],
    [
      "an older instance: the configured context, capped by the model's",
      undefined,
      8192,
      2048,
      2048,
    ],
    ["an older instance, nothing configured: 4096", undefined, undefined, 131_072, 4096],
    ["a model whose context is unknown: the configured one", undefined, 8192, 0, 8192],
  ])("%s", (_what, placed, configured, trained, want) => {
    expect(runnerContext(placed, configured, trained)).toBe(want);
  });
});

describe("logTail", () => {
  const dir = mkdtempSync(join(tmpdir(), "runner-tail-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("returns the last lines of a small file, all of it when it fits", async () => {
    const f = join(dir, "small.log");
    writeFileSync(f, "one\ntwo\n\nthree\n");
    expect(await logTail(f)).toEqual(["one", "two", "three"]);
    expect(await logTail(f, 2)).toEqual(["two", "three"]);
  });

  it("reads only the end of a large file and drops the line cut in half", async () => {
    const f = join(dir, "large.log");
    const lines = Array.from({ length: 5000 }, (_, i) => `line ${i} ${"x".repeat(i % 7)}`);
    writeFileSync(f, lines.join("\n") + "\n");
    const tail = await logTail(f, 1000);
    expect(tail.at(-1)).toBe(lines.at(-1));
    expect(tail.length).toBeLessThan(1000);
    expect(lines.join("\n").endsWith(tail.join("\n"))).toBe(true);
    expect(lines).toContain(tail[0]);
  });

  it("is empty for a file that does not exist", async () => {
    expect(await logTail(join(dir, "missing.log"))).toEqual([]);
  });
});

describe("engineEnvironment", () => {
  it("passes locale, paths and GPU runtime settings, never tokens or the cluster secret", () => {
    const env = engineEnvironment(
      {
        PATH: "/usr/bin",
        HOME: "/root",
        LANG: "C.UTF-8",
        CUDA_VISIBLE_DEVICES: "0",
        GGML_CUDA_NO_PINNED: "1",
        HF_TOKEN: "hf_secret",
        HUGGING_FACE_HUB_TOKEN: "hf_secret2",
        SERVICE_CLUSTER_SECRET: "s3cret",
        AWS_SECRET_ACCESS_KEY: "aws",
        NODE_OPTIONS: "--inspect",
        LLAMA_ARG_HOST: "0.0.0.0",
      },
      { LLAMA_API_KEY: "ice_k" },
    );
    expect(env).toEqual({
      PATH: "/usr/bin",
      HOME: "/root",
      LANG: "C.UTF-8",
      CUDA_VISIBLE_DEVICES: "0",
      GGML_CUDA_NO_PINNED: "1",
      LLAMA_API_KEY: "ice_k",
    });
  });
});
