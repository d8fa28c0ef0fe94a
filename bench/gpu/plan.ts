// The GPU check's plan, pure: which checks run on this machine and why the others are skipped.
// bench/gpu/main.ts runs it; plan.test.ts (in CI's unit project) is its dry run on a CPU machine,
// a one-GPU host and a two-GPU host.

/** What the machine has, as nvidia-smi and PATH tell. */
export interface Inventory {
  readonly gpus: readonly { readonly name: string; readonly vramMiB: number }[];
  /** nvcc on PATH (the project then builds a CUDA engine). */
  readonly nvcc: boolean;
}

export type CheckId =
  | "engine-build"
  | "engine-probe"
  | "gpu-telemetry"
  | "vram-counting"
  | "full-offload"
  | "chat"
  | "pipeline-rpc"
  | "tensor-across-nodes"
  | "tensor-within-node"
  | "gateway-bench";

export interface Check {
  readonly id: CheckId;
  readonly title: string;
  /** Why it does not run here; undefined: it runs. */
  readonly skip?: string;
}

const TITLES: Readonly<Record<CheckId, string>> = {
  "engine-build": "the project's engine build (scripts/build-engine.mjs) makes a CUDA engine",
  "engine-probe": "the engine's capability probe: split modes across nodes",
  "gpu-telemetry": "telemetry reports the GPU(s)",
  "vram-counting": "placement counts VRAM, not RAM",
  "full-offload": "one node: every layer offloaded to the GPU",
  chat: "a chat completion through the node",
  "pipeline-rpc": "two nodes: Pipeline over ggml-rpc with the GPU on both ranks",
  "tensor-across-nodes":
    "two nodes: Tensor across nodes served when the probe allows it, else refused with tensor_unsupported",
  "tensor-within-node": "one node: Tensor across its local GPUs (-sm row -ts by free VRAM)",
  "gateway-bench": "bench/gateway: gateway against its floor at GPU token rates",
};

export function gpuCheckPlan(inv: Inventory): Check[] {
  const noGpu =
    inv.gpus.length === 0 ? "no NVIDIA GPU here (nvidia-smi lists none): a CPU machine" : undefined;
  const noCuda =
    noGpu ?? (inv.nvcc ? undefined : "no nvcc on PATH: the project builds a CPU engine");
  const plan: Check[] = [];
  // Without a CUDA build the CPU points say what they check there.
  const title = (id: CheckId) =>
    noCuda && id === "engine-build"
      ? "the project's engine build (scripts/build-engine.mjs) makes an engine (a CPU one here)"
      : noCuda && id === "pipeline-rpc"
        ? "two nodes: Pipeline over ggml-rpc (CPU ranks here)"
        : TITLES[id];
  const add = (id: CheckId, skip?: string) =>
    plan.push(skip === undefined ? { id, title: title(id) } : { id, title: title(id), skip });
  // The CPU points run everywhere: the build (CPU here), the probe, one and two nodes, chat.
  add("engine-build");
  add("engine-probe");
  add("gpu-telemetry", noGpu);
  add("vram-counting", noCuda);
  add("full-offload", noCuda);
  add("chat");
  add("pipeline-rpc");
  add("tensor-across-nodes");
  add(
    "tensor-within-node",
    noCuda ??
      (inv.gpus.length < 2
        ? `${inv.gpus.length} GPU here: Tensor within a node needs two or more`
        : undefined),
  );
  add(
    "gateway-bench",
    noCuda ? `${noCuda}; bench/gateway runs on its own (npm run bench gateway)` : undefined,
  );
  return plan;
}
