import { describe, expect, it } from "vitest";
import type { EngineInfo, Gpu } from "@ic/protocol";
import { nodeHealth } from "./health.ts";
import type { Observations } from "./health.ts";

const cpuEngine: EngineInfo = {
  server_bin: "/e/llama-server",
  rpc_bin: "/e/rpc",
  backend: "cpu",
  usable: true,
  overridden: false,
};
const cudaEngine: EngineInfo = { ...cpuEngine, backend: "cuda" };
const rtx: Gpu = {
  vendor: "NVIDIA",
  model: "RTX 4090",
  vram_total_bytes: 24 * 1024 ** 3,
  vram_free_bytes: 20 * 1024 ** 3,
};
const base: Observations = {
  gpus: [],
  gpuVisible: false,
  engine: cpuEngine,
  declaredBackend: "auto",
  platform: "linux",
};

const codes = (o: Partial<Observations>) =>
  nodeHealth({ ...base, ...o }).map((h) => `${h.code}:${h.severity}`);

describe("nodeHealth", () => {
  it("a plain CPU node is healthy", () => {
    expect(codes({})).toEqual([]);
  });
  it("a visible GPU with a CPU-only engine is gpu_serving_disabled (error)", () => {
    expect(codes({ gpus: [rtx], gpuVisible: true })).toEqual(["gpu_serving_disabled:error"]);
    expect(codes({ gpus: [rtx], gpuVisible: true, engine: cudaEngine })).toEqual([]);
  });
  it("a GPU whose memory cannot be read is gpu_detection_degraded (warn)", () => {
    expect(codes({ gpus: [], gpuVisible: true, engine: cudaEngine })).toEqual([
      "gpu_detection_degraded:warn",
    ]);
    expect(
      codes({
        gpus: [{ ...rtx, vram_total_bytes: null, vram_free_bytes: null }],
        gpuVisible: true,
        engine: cudaEngine,
      }),
    ).toEqual(["gpu_detection_degraded:warn"]);
  });
  it("an unusable override is invalid_engine_binary (warn) and names the variable and path", () => {
    const h = nodeHealth({
      ...base,
      engine: {
        ...cpuEngine,
        server_bin: "/nope",
        usable: false,
        overridden: true,
        problem: "/nope does not exist",
      },
    });
    expect(h.map((x) => x.code)).toEqual(["invalid_engine_binary"]);
    expect(h[0]!.message).toContain("SERVICE_ENGINE_SERVER_BIN");
    expect(h[0]!.message).toContain("/nope does not exist");
  });
  it("a declared backend without matching hardware is backend_override_conflict (warn)", () => {
    expect(codes({ declaredBackend: "cuda" })).toEqual(["backend_override_conflict:warn"]);
    expect(codes({ declaredBackend: "metal" })).toEqual(["backend_override_conflict:warn"]);
    expect(
      codes({ declaredBackend: "cuda", gpus: [rtx], gpuVisible: true, engine: cudaEngine }),
    ).toEqual([]);
  });
});
