// keep_alive as model.json gives it (Ollama's forms: seconds, or a duration) in milliseconds.
import { describe, expect, it } from "vitest";
import { keepAliveMs, KeepAliveSchema, ModelJsonSchema } from "./cluster.ts";

describe("keepAliveMs", () => {
  it.each([
    [0, 0],
    [-1, -1],
    [300, 300_000],
    ["-1", -1],
    ["0", 0],
    ["45", 45_000],
    ["30s", 30_000],
    ["5m", 300_000],
    ["2h", 7_200_000],
    ["250ms", 250],
  ] as const)("%j is %d ms", (v, want) => {
    expect(keepAliveMs(KeepAliveSchema.parse(v))).toBe(want);
  });

  it.each([-2, 1.5, "5 m", "five", "-5m", ""])("refuses %j", (v) => {
    expect(KeepAliveSchema.safeParse(v).success).toBe(false);
  });

  it("model.json takes on_demand and keep_alive, nothing it does not know", () => {
    expect(ModelJsonSchema.parse({ on_demand: true, keep_alive: "10m" })).toEqual({
      on_demand: true,
      keep_alive: "10m",
    });
    expect(ModelJsonSchema.safeParse({ keepalive: 3 }).success).toBe(false);
  });
});
