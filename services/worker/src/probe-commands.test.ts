import { describe, expect, it } from "vitest";
import { EngineSchema } from "@ic/config";
import { splitProbeCommands } from "./probe-commands.ts";

const model = { path: "/p/probe.gguf", layers: 4, contextLength: 2048 };
const rpc = ["127.0.0.1:7001", "127.0.0.1:7002"];
const flag = (args: readonly string[], name: string) => args[args.indexOf(name) + 1];

describe("splitProbeCommands: the runner's command lines for the split probe", () => {
  const defaults = EngineSchema.parse({});

  it.each([
    // mode, backend, -sm, -ngl, -ts: a CPU rank 0 offloads every layer but its own to the rpc
    // ranks (Pipeline) and holds no Tensor share; a GPU rank 0 splits onto its local GPU too.
    ["layer", "cpu", "layer", "3", "1,1"],
    ["layer", "cuda", "layer", "5", "1,1,2"],
    ["tensor", "cpu", "tensor", "5", "0.333333,0.333333"],
    ["tensor", "cuda", "tensor", "5", "0.333333,0.333333,0.333333"],
    ["row", "cuda", "row", "5", "0.333333,0.333333,0.333333"],
  ] as const)("%s on a %s engine: -sm %s -ngl %s -ts %s", (mode, backend, sm, ngl, ts) => {
    const args = splitProbeCommands(defaults, backend).server(model, mode, rpc, 9000);
    expect(flag(args, "--rpc")).toBe(rpc.join(","));
    expect(flag(args, "-sm")).toBe(sm);
    expect(flag(args, "-ngl")).toBe(ngl);
    expect(flag(args, "-ts")).toBe(ts);
    expect(flag(args, "--port")).toBe("9000");
    expect(flag(args, "--host")).toBe("127.0.0.1");
  });

  it("carries the config's flags as the runner does: context capped by the model's, threads, extra arguments, and no -np of its own", () => {
    const settings = EngineSchema.parse({
      context_size: 8192,
      threads: 3,
      extra_args: ["--flash-attn", "on"],
    });
    const c = splitProbeCommands(settings, "cuda");
    const args = c.server(model, "tensor", rpc, 9000);
    expect(flag(args, "-c")).toBe("2048");
    expect(flag(args, "-t")).toBe("3");
    expect(args.slice(-2)).toEqual(["--flash-attn", "on"]);
    expect(args).toContain("--metrics");
    expect(args).not.toContain("-np");
    expect(c.rpc(7001)).toEqual(["-H", "127.0.0.1", "-p", "7001", "-t", "3"]);
    const small = splitProbeCommands(EngineSchema.parse({ context_size: 512 }), "cpu");
    expect(flag(small.server(model, "layer", rpc, 1), "-c")).toBe("512");
  });
});
