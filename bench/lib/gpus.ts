// This machine's NVIDIA GPUs as nvidia-smi lists them: what the GPU check compares the node's
// telemetry with, and what the stand-in engine claims on a GPU machine.
import { execFileSync } from "node:child_process";

export interface NvidiaGpu {
  readonly name: string;
  readonly totalMiB: number;
  readonly freeMiB: number;
}

/** The GPUs nvidia-smi lists; none without nvidia-smi, a driver or a GPU. */
export function nvidiaGpus(): NvidiaGpu[] {
  try {
    const out = execFileSync(
      "nvidia-smi",
      ["--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"],
      { encoding: "utf8", timeout: 20_000, stdio: ["ignore", "pipe", "ignore"] },
    );
    return out
      .trim()
      .split("\n")
      .filter(Boolean)
      .map((l) => {
        const [name, total, free] = l.split(",").map((x) => x.trim());
        return { name: name ?? "?", totalMiB: Number(total), freeMiB: Number(free) };
      });
  } catch {
    return [];
  }
}
