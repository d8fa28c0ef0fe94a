// The stand-in engine (stand-in-engine.mjs) as benchmarks find it: its path (the node's
// `engine.server_bin`), and its processes, which run as `node stand-in-engine.mjs ...` and so are
// not named llama-server.
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { nvidiaGpus } from "./gpus.ts";

export const STAND_IN = join(dirname(fileURLToPath(import.meta.url)), "stand-in-engine.mjs");

/**
 * This machine's NVIDIA GPUs as a CUDA llama-server lists them (`--list-devices`), for the stand-in's
 * STAND_IN_DEVICES: a node on a machine with a GPU refuses a CPU-only engine (gpu_serving_disabled),
 * so there the stand-in claims the GPUs, and placement counts their VRAM as for a real CUDA build.
 * Empty without nvidia-smi or a GPU.
 */
export function standInDevices(): string {
  return nvidiaGpus()
    .map((g, i) => `CUDA${i}: ${g.name} (${g.totalMiB} MiB, ${g.freeMiB} MiB free)`)
    .join("\n");
}

function argvOf(pid: number): string[] {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
  } catch {
    return []; // gone meanwhile
  }
}

/** Whether process `pid` is a stand-in engine. */
export function isStandIn(pid: number): boolean {
  return argvOf(pid).some((a) => a.endsWith("stand-in-engine.mjs"));
}

/** The API key and endpoint port of every stand-in engine listening on one of `hosts`. */
export function standInsOn(hosts: readonly string[]): { port: number; key: string }[] {
  const out: { port: number; key: string }[] = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    const pid = Number(d);
    const argv = argvOf(pid);
    if (!argv.some((a) => a.endsWith("stand-in-engine.mjs"))) continue;
    const at = (flag: string) => argv[argv.indexOf(flag) + 1];
    if (!hosts.includes(at("--host") ?? "")) continue;
    let env: string[];
    try {
      env = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
    } catch {
      continue;
    }
    const key = env.find((e) => e.startsWith("LLAMA_API_KEY="))?.slice("LLAMA_API_KEY=".length);
    if (key) out.push({ port: Number(at("--port")), key });
  }
  return out;
}
