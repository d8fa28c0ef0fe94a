import { describe, expect, it } from "vitest";
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
