// The split probe with the runner's own command lines, against the real engine build: on this CPU
// build the experimental tensor mode serves a three-rank runner command and answers as its Pipeline
// does, and row cannot split over rpc.
import { describe, expect, it } from "vitest";
import { EngineSchema } from "@ic/config";
import { locateEngine, probeSplitSupport } from "@ic/engine";
import { splitProbeCommands } from "./probe-commands.ts";

describe("probeSplitSupport with splitProbeCommands", () => {
  it("runs the runner's commands: row refused in the engine's words, tensor served with the same answer as a Pipeline", async () => {
    const engine = await locateEngine();
    const commands = splitProbeCommands(EngineSchema.parse({ threads: 1 }), engine.backend);
    const r = await probeSplitSupport(engine, { commands });
    expect(r.row_over_rpc).toBe(false);
    expect(r.evidence).toMatch(/row: .*does not support split buffers/);
    expect(r.tensor_over_rpc).toBe(true);
    expect(r.evidence).toMatch(/tensor: served over two rpc devices, same answer as a layer split/);
  });
});
