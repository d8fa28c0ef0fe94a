// Pure: the command lines the engine's split probe runs (packages/engine capabilities.ts), made by the
// runner's own builders (args.ts) for a three-rank instance of the probe's model: rank 0's
// llama-server with the config's engine flags, context, threads and extra arguments, over the other
// ranks' ggml-rpc-servers, and rank 0's local GPU on a GPU engine. So what the probe finds working is
// what a placement of that kind starts (an experimental split that passed a hand-made command line
// and then never served in the runner's was the failure this closes).
import type { ProbeModel, SplitCommands, SplitMode } from "@ic/engine";
import { InstanceIdSchema, ModelIdSchema, NodeIdSchema } from "@ic/protocol";
import type { Assignment, EngineInfo, Instance } from "@ic/protocol";
import { rpcArgs, serverArgs } from "./args.ts";
import type { EngineSettings } from "./args.ts";
import { runnerContext } from "./slot.ts";

type ProbeSettings = Pick<EngineSettings, "gpu_layers" | "threads" | "extra_args" | "context_size">;

/** The probe's instance: `ranks` ranks, Pipeline layers split as placement would, Tensor evenly. */
function probeInstance(model: ProbeModel, mode: SplitMode, ranks: number): Instance {
  const base = Math.floor(model.layers / ranks);
  const assignments: Assignment[] = Array.from({ length: ranks }, (_, rank) => ({
    node_id: NodeIdSchema.parse(`probe-${rank}`),
    peer_key: "",
    rank,
    ...(mode === "layer"
      ? { layers: base + (rank === 0 ? model.layers - base * ranks : 0) }
      : { fraction: 1 / ranks }),
    weight_bytes: 0,
    required_bytes: 0,
  }));
  return {
    instance_id: InstanceIdSchema.parse("split-probe"),
    model_id: ModelIdSchema.parse("probe/split"),
    sharding: mode === "layer" ? "Pipeline" : "Tensor",
    created_at: 0,
    assignments,
  };
}

/**
 * The runner's command lines for the split probe. `backend` is the engine's: on a GPU engine rank 0
 * splits its share onto one local GPU, as the worker does when it knows no more of its GPUs.
 */
export function splitProbeCommands(
  settings: ProbeSettings,
  backend: EngineInfo["backend"],
): SplitCommands {
  const localGpus = backend === "cuda" || backend === "metal" ? [1] : [];
  return {
    rpc: (port) => rpcArgs("127.0.0.1", port, settings.threads),
    server: (model, mode, rpc, port) =>
      serverArgs({
        instance: probeInstance(model, mode, rpc.length + 1),
        modelPath: model.path,
        host: "127.0.0.1",
        port,
        contextSize: runnerContext(undefined, settings.context_size, model.contextLength),
        engine: settings,
        totalLayers: model.layers,
        rpcEndpoints: rpc,
        localGpus,
        tensorMode: mode === "row" ? "row" : "tensor",
      }),
  };
}
