import { describe, expect, it } from "vitest";
import { ZodError } from "zod";
import { parseModelRef } from "./store.ts";

describe("parseModelRef", () => {
  it.each([
    ["Qwen/Qwen2.5-0.5B-Instruct-GGUF", { model_id: "Qwen/Qwen2.5-0.5B-Instruct-GGUF" }],
    ["org/repo:Q4_K_M", { model_id: "org/repo", quant: "Q4_K_M" }],
    ["org/repo@v2", { model_id: "org/repo", revision: "v2" }],
    ["org/repo:q8_0@refs-pr-1", { model_id: "org/repo", quant: "q8_0", revision: "refs-pr-1" }],
  ])("%s", (ref, want) => {
    expect(parseModelRef(ref)).toEqual(want);
  });

  it.each(["../x", "org/repo:", "org/repo:Q4 K", "org/repo@../main", "a/b/c:Q8_0", ""])(
    "refuses %j",
    (ref) => {
      expect(() => parseModelRef(ref)).toThrow(ZodError);
    },
  );
});
