// Pure: the exact llama.cpp command line for one rank of an instance.
// Rank 0 runs llama-server (explicit host, port, -ngl, -c, -fit off, --metrics; --rpc and a split for
// multi-node); every other rank runs ggml-rpc-server.
import type { Instance } from "@ic/protocol";

export interface ServerArgsInput {
  readonly instance: Instance;
  readonly modelPath: string;
  readonly drafterPath?: string | undefined;
  readonly mmprojPath?: string | undefined;
  readonly host: string;
  readonly port: number;
  readonly contextSize: number;
  readonly gpuLayers: number;
  readonly totalLayers: number;
  /** host:port of ranks 1..n-1, in rank order. */
  readonly rpcEndpoints: readonly string[];
  /** Whether rank 0 serves on a local GPU (then it is a device in the split too). */
  readonly localGpu: boolean;
  readonly extraArgs: readonly string[];
}

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
  const ranks = i.instance.assignments;
  if (ranks.length > 1) {
    a.push("--rpc", i.rpcEndpoints.join(","));
    if (i.instance.sharding === "Tensor") {
      a.push("-sm", "row", "-ngl", String(i.totalLayers + 1));
      // llama.cpp puts RPC devices first, then local GPUs: split shares follow that order.
      const shares = (i.localGpu ? [...ranks.slice(1), ranks[0]!] : ranks.slice(1)).map((r) =>
        String(r.fraction ?? 1 / ranks.length),
      );
      a.push("-ts", shares.join(","));
    } else {
      // Pipeline: every rank holds its layer share. Remote ranks are RPC devices; rank 0's own layers
      // stay on its local device (its GPU if it has one, else the CPU, by offloading only the rest).
      const layers = ranks.map((r) => r.layers ?? 0);
      const remote = layers.slice(1);
      if (i.localGpu) {
        a.push(
          "-sm",
          "layer",
          "-ngl",
          String(i.totalLayers + 1),
          "-ts",
          [...remote, layers[0]].join(","),
        );
      } else {
        const offloaded = remote.reduce((s, n) => s + n, 0);
        // -ngl counts the output layer too: it goes with the offloaded layers to the last remote rank.
        a.push("-sm", "layer", "-ngl", String(offloaded + 1), "-ts", remote.join(","));
      }
    }
  } else {
    a.push("-ngl", String(i.gpuLayers));
  }
  // This llama.cpp only drafts when a speculative type is named; -md alone loads the drafter idle.
  if (i.drafterPath)
    a.push("-md", i.drafterPath, "-ngld", String(i.gpuLayers), "--spec-type", "draft-simple");
  if (i.mmprojPath) a.push("--mmproj", i.mmprojPath);
  a.push(...i.extraArgs);
  return a;
}

export function rpcArgs(host: string, port: number, threads?: number): string[] {
  const a = ["-H", host, "-p", String(port)];
  if (threads) a.push("-t", String(threads));
  return a;
}
