import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { writeTinyModel } from "@ic/gguf";
import { createLogger } from "@ic/log";
import { readModelDir } from "./registry.ts";
import { servedGguf } from "./registry.ts";

const sized = (entries: Record<string, number>) => ({
  names: Object.keys(entries),
  sizes: new Map(Object.entries(entries)),
});

describe("servedGguf", () => {
  it.each([
    ["the only file", { "tiny-llama.gguf": 10 }, "tiny-llama.gguf"],
    ["the largest model", { "a-Q4_K_M.gguf": 10, "a-Q8_0.gguf": 20 }, "a-Q8_0.gguf"],
    [
      "a split counted whole, loaded from its first part",
      {
        "m-Q8_0-00001-of-00003.gguf": 5,
        "m-Q8_0-00002-of-00003.gguf": 9,
        "m-Q8_0-00003-of-00003.gguf": 9,
        "m-Q4_K_M.gguf": 20,
      },
      "m-Q8_0-00001-of-00003.gguf",
    ],
    [
      "a split without its first part does not win over a whole file",
      { "m-00002-of-00002.gguf": 50, "other.gguf": 10 },
      "other.gguf",
    ],
  ])("%s", (_what, entries, want) => {
    const { names, sizes } = sized(entries);
    expect(servedGguf(names, sizes)).toBe(want);
  });
});

describe("readModelDir", () => {
  it("carries model.json's on-demand policy into the record, keep_alive in ms", async () => {
    const root = mkdtempSync(join(tmpdir(), "ic-registry-"));
    const dir = join(root, "org--m");
    mkdirSync(dir);
    await writeTinyModel(join(dir, "m.gguf"));
    writeFileSync(join(dir, "model.json"), JSON.stringify({ on_demand: true, keep_alive: "2m" }));
    const r = await readModelDir(root, "org--m", createLogger({ enabled: false }));
    expect(r).toMatchObject({ model_id: "org/m", on_demand: true, keep_alive_ms: 120_000 });
  });
});
