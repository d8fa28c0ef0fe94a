// Dry run of the GPU check's plan (CI's unit project): what runs and what is skipped, with why.
import { describe, expect, it } from "vitest";
import { gpuCheckPlan } from "./plan.ts";

const summary = (inv: Parameters<typeof gpuCheckPlan>[0]) =>
  gpuCheckPlan(inv).map((c) => `${c.id}${c.skip ? ` SKIP: ${c.skip}` : ""}`);

describe("the GPU check's plan", () => {
  it("on a CPU machine it runs the CPU points and says why every GPU point is skipped", () => {
    expect(summary({ gpus: [], nvcc: false })).toEqual([
      "engine-build",
      "engine-probe",
      "gpu-telemetry SKIP: no NVIDIA GPU here (nvidia-smi lists none): a CPU machine",
      "vram-counting SKIP: no NVIDIA GPU here (nvidia-smi lists none): a CPU machine",
      "full-offload SKIP: no NVIDIA GPU here (nvidia-smi lists none): a CPU machine",
      "chat",
      "pipeline-rpc",
      "tensor-across-nodes",
      "tensor-within-node SKIP: no NVIDIA GPU here (nvidia-smi lists none): a CPU machine",
      "gateway-bench SKIP: no NVIDIA GPU here (nvidia-smi lists none): a CPU machine; bench/gateway runs on its own (npm run bench gateway)",
    ]);
  });

  it("without a CUDA build the CPU points are titled for what they check there", () => {
    const titles = new Map(gpuCheckPlan({ gpus: [], nvcc: true }).map((c) => [c.id, c.title]));
    expect(titles.get("engine-build")).toContain("makes an engine (a CPU one here)");
    expect(titles.get("pipeline-rpc")).toBe("two nodes: Pipeline over ggml-rpc (CPU ranks here)");
    const gpu = gpuCheckPlan({ gpus: [{ name: "NVIDIA H200", vramMiB: 143771 }], nvcc: true });
    expect(gpu.find((c) => c.id === "engine-build")!.title).toContain("makes a CUDA engine");
  });

  it("with one GPU everything runs but Tensor within a node", () => {
    const plan = gpuCheckPlan({ gpus: [{ name: "NVIDIA H200", vramMiB: 143771 }], nvcc: true });
    expect(plan.filter((c) => c.skip).map((c) => [c.id, c.skip])).toEqual([
      ["tensor-within-node", "1 GPU here: Tensor within a node needs two or more"],
    ]);
  });

  it("with two GPUs everything runs; a GPU without nvcc builds no CUDA engine", () => {
    const two = [
      { name: "RTX 4090", vramMiB: 24564 },
      { name: "RTX 4090", vramMiB: 24564 },
    ];
    expect(gpuCheckPlan({ gpus: two, nvcc: true }).every((c) => !c.skip)).toBe(true);
    expect(summary({ gpus: two, nvcc: false })).toContain(
      "full-offload SKIP: no nvcc on PATH: the project builds a CPU engine",
    );
  });
});
