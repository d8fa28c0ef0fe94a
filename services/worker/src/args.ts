// Pure: the exact llama.cpp command line for one rank of an instance.
// Rank 0 runs llama-server (explicit host, port, -ngl, -c, -fit off, --metrics; --rpc and a split for
// multi-node); every other rank runs ggml-rpc-server.
import type { Config } from "@ic/config";
import type { Instance, Pooling } from "@ic/protocol";
import { INSTANCE_KIND_TABLE, kindOf } from "@ic/protocol";

/** The config's `engine` section (its defaults in packages/config's schema). */
export type EngineSettings = Config["engine"];

export interface ServerArgsInput {
  readonly instance: Instance;
  readonly modelPath: string;
  readonly drafterPath?: string | undefined;
  readonly mmprojPath?: string | undefined;
  /** Pooling of an embedding instance (the model's `pooling`, else mean). */
  readonly pooling?: Pooling | undefined;
  readonly host: string;
  readonly port: number;
  readonly contextSize: number;
  /** The flags of the config's engine section that become arguments (a new flag: read it below). */
  readonly engine: Pick<EngineSettings, "gpu_layers" | "threads" | "extra_args">;
  readonly totalLayers: number;
  /** host:port of ranks 1..n-1, in rank order. */
  readonly rpcEndpoints: readonly string[];
  /**
   * Free bytes of each local GPU rank 0 serves on (empty on a CPU engine): each is a device of the
   * split, after the rpc devices, and rank 0's share is divided among them by free memory.
   */
  readonly localGpus: readonly number[];
  /**
   * How Tensor splits across nodes: `row` where the engine's capability probe found it running over
   * rpc devices, else the experimental `tensor` mode (placed only when the operator allowed it).
   */
  readonly tensorMode: "tensor" | "row";
  /**
   * The directory slots are saved to and restored from (`--slot-save-path`), where the engine's
   * probe found it moves KV caches between servers (issue 50); absent: no slot files.
   */
  readonly slotDir?: string | undefined;
  /** Serve HTTPS with this certificate and key (PEM files). */
  readonly tls?: { readonly certFile: string; readonly keyFile: string } | undefined;
}

/** `share` divided among devices in proportion to `weights` (equal when they are all 0). */
function divide(share: number, weights: readonly number[]): number[] {
  const total = weights.reduce((s, w) => s + w, 0);
  return weights.map((w) => (total > 0 ? (share * w) / total : share / weights.length));
}

const fmt = (x: number) => String(Math.round(x * 1e6) / 1e6);

export function serverArgs(i: ServerArgsInput): string[] {
  const a = [
    "-m",
    i.modelPath,
    "--alias",
    i.instance.model_id,
    "--host",
    i.host,
    "--port",
    String(i.port),
    "-c",
    String(i.contextSize),
  ];
  // -lv 4: the runner log then shows each device's buffers (RPC0[...], CPU_Mapped), per-request
  // timings and speculative-decoding statistics -- what the health checklist reads.
  a.push("-fit", "off", "--metrics", "--no-webui", "-lv", "4");
  if (i.tls) a.push("--ssl-key-file", i.tls.keyFile, "--ssl-cert-file", i.tls.certFile);
  if (i.slotDir) a.push("--slot-save-path", i.slotDir);
  const ranks = i.instance.assignments;
  const gpus = i.localGpus;
  if (ranks.length > 1) {
    a.push("--rpc", i.rpcEndpoints.join(","));
    // llama.cpp lists rpc devices first, then local GPUs: split shares follow that order.
    if (i.instance.sharding === "Tensor") {
      a.push("-sm", i.tensorMode, "-ngl", String(i.totalLayers + 1));
      const share = (r: (typeof ranks)[number]) => r.fraction ?? 1 / ranks.length;
      const shares = [...ranks.slice(1).map(share), ...divide(share(ranks[0]!), gpus)];
      a.push("-ts", shares.map(fmt).join(","));
    } else {
      // Pipeline: every rank holds its layer share. Remote ranks are RPC devices; rank 0's own layers
      // stay on its local devices (its GPUs if it has any, else the CPU, by offloading only the rest).
      const layers = ranks.map((r) => r.layers ?? 0);
      const remote = layers.slice(1);
      if (gpus.length > 0) {
        a.push(
          "-sm",
          "layer",
          "-ngl",
          String(i.totalLayers + 1),
          "-ts",
          [...remote, ...divide(layers[0]!, gpus)].map(fmt).join(","),
        );
      } else {
        const offloaded = remote.reduce((s, n) => s + n, 0);
        // -ngl counts the output layer too: it goes with the offloaded layers to the last remote rank.
        a.push("-sm", "layer", "-ngl", String(offloaded + 1), "-ts", remote.join(","));
      }
    }
  } else {
    a.push("-ngl", String(i.engine.gpu_layers));
    // Tensor on one node means a row split across its local GPUs, by their free memory; Pipeline
    // spreads whole layers over them the same way (what placement counted, GPU by GPU).
    if (gpus.length > 1)
      a.push(
        "-sm",
        i.instance.sharding === "Tensor" ? "row" : "layer",
        "-ts",
        divide(1, gpus).map(fmt).join(","),
      );
  }
  // This llama.cpp only drafts when a speculative type is named; -md alone loads the drafter idle.
  if (i.drafterPath)
    a.push(
      "-md",
      i.drafterPath,
      "-ngld",
      String(i.engine.gpu_layers),
      "--spec-type",
      "draft-simple",
    );
  if (i.mmprojPath) a.push("--mmproj", i.mmprojPath);
  // The engine's mode for the instance's kind (an embedding or a reranking engine).
  a.push(...INSTANCE_KIND_TABLE[kindOf(i.instance)].engineArgs(i.pooling));
  if (i.engine.threads) a.push("-t", String(i.engine.threads));
  a.push(...i.engine.extra_args);
  return a;
}

export function rpcArgs(host: string, port: number, threads?: number): string[] {
  const a = ["-H", host, "-p", String(port)];
  if (threads) a.push("-t", String(threads));
  return a;
}
