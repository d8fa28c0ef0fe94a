// Capability conflicts reported in nodeHealth: observed hardware versus the engine and the declaration.
// Pure: the worker gathers observations, this decides the four stable codes of the spec.
import type { EngineInfo, Gpu, HealthEntry } from "@ic/protocol";
import { GiB } from "@ic/protocol";

export interface Observations {
  readonly gpus: readonly Gpu[];
  /** An NVIDIA/AMD device is visible on the bus (lspci / systeminformation) even if VRAM can't be read. */
  readonly gpuVisible: boolean;
  readonly engine: EngineInfo;
  readonly declaredBackend: "auto" | "cpu" | "cuda" | "metal";
  readonly platform: NodeJS.Platform;
  /** Environment variable the override came from, for messages. */
  readonly overrideVar?: string;
}

function servingCapable(g: Gpu): boolean {
  return (
    /nvidia|amd|advanced micro|apple/i.test(g.vendor) &&
    (g.vram_total_bytes === null || g.vram_total_bytes >= GiB)
  );
}

export function nodeHealth(o: Observations): HealthEntry[] {
  const out: HealthEntry[] = [];
  const capable = o.gpus.filter(servingCapable);
  if (capable.length > 0 && o.engine.usable && o.engine.backend === "cpu") {
    out.push({
      code: "gpu_serving_disabled",
      severity: "error",
      message: `observed ${capable.length} serving-capable GPU(s) (${capable.map((g) => g.model).join(", ")}) but the configured engine ${o.engine.server_bin} is a CPU-only build`,
      remediation:
        "rebuild the engine with CUDA (install the CUDA toolkit so nvcc is on PATH, then rerun `npm start`), or point SERVICE_ENGINE_SERVER_BIN at a GPU build",
    });
  }
  const unreadable = o.gpus.filter((g) => g.vram_total_bytes === null);
  if ((o.gpuVisible && o.gpus.length === 0) || unreadable.length > 0) {
    out.push({
      code: "gpu_detection_degraded",
      severity: "warn",
      message: `a GPU is present but its memory could not be read (${unreadable.map((g) => g.model).join(", ") || "no driver tool answered"}); placement uses system memory instead of VRAM`,
      remediation:
        "install the vendor driver and its tools (nvidia-smi) and check that this user can access the device",
    });
  }
  if (o.engine.overridden && !o.engine.usable) {
    out.push({
      code: "invalid_engine_binary",
      severity: "warn",
      message: `${o.overrideVar ?? "SERVICE_ENGINE_SERVER_BIN"} is set to ${o.engine.server_bin ?? "(empty)"} but it is unusable: ${o.engine.problem ?? "unknown problem"}; no managed build replaces it`,
      remediation: `fix or unset ${o.overrideVar ?? "SERVICE_ENGINE_SERVER_BIN"} so the managed build is used`,
    });
  }
  const hasNvidia = o.gpuVisible || o.gpus.some((g) => /nvidia/i.test(g.vendor));
  const conflict =
    (o.declaredBackend === "cuda" && !hasNvidia) ||
    (o.declaredBackend === "metal" && o.platform !== "darwin");
  if (conflict) {
    out.push({
      code: "backend_override_conflict",
      severity: "warn",
      message: `declared backend "${o.declaredBackend}" but this node observes no matching hardware (${o.gpus.length} GPU(s) detected, platform ${o.platform}); the declaration is still honored`,
      remediation: "set node.backend to auto (or the backend this machine really has)",
    });
  }
  return out;
}
