import { describe, expect, it } from "vitest";
import { quantOf, quantVariants, selectHubFiles } from "./hub-select.ts";
import type { HubFile } from "./hub.ts";

const f = (path: string, bytes = 100): HubFile => ({ path, bytes });
const paths = (s: ReturnType<typeof selectHubFiles>) => (s.ok ? s.files.map((x) => x.path) : []);

/** A typical `*-GGUF` repo: several quantizations, one split, projectors, metadata. */
const REPO: HubFile[] = [
  f(".gitattributes", 2),
  f("README.md", 5),
  f("config.json", 3),
  f("qwen2.5-0.5b-instruct-q2_k.gguf", 300),
  f("qwen2.5-0.5b-instruct-q4_k_m.gguf", 500),
  f("qwen2.5-0.5b-instruct-q8_0.gguf", 800),
  f("qwen2.5-0.5b-instruct-fp16-00001-of-00002.gguf", 900),
  f("qwen2.5-0.5b-instruct-fp16-00002-of-00002.gguf", 700),
  f("mmproj-model-f16.gguf", 60),
  f("mmproj-model-bf16.gguf", 60),
  f("model.safetensors", 5000),
];

describe("quantOf", () => {
  it.each([
    ["Qwen2.5-0.5B-Instruct-Q4_K_M.gguf", "Q4_K_M"],
    ["qwen2.5-0.5b-instruct-q8_0.gguf", "Q8_0"],
    ["model-IQ2_XXS.gguf", "IQ2_XXS"],
    ["gemma-3-4b-it-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"],
    ["llama.f16.gguf", "F16"],
    ["llama-BF16-00001-of-00003.gguf", "BF16"],
    ["Q4_K_M/model-00001-of-00002.gguf", "Q4_K_M"],
    ["gpt-oss-20b-MXFP4.gguf", "MXFP4"],
    ["tiny-llama.gguf", null],
    // A "q" inside a word is not a tag.
    ["qwen-chat.gguf", null],
  ])("%s -> %s", (path, want) => {
    expect(quantOf(path)).toBe(want);
  });
});

describe("selectHubFiles", () => {
  it("groups split parts into one variant and sorts variants by size", () => {
    expect(quantVariants(REPO).map((v) => [v.label, v.bytes])).toEqual([
      ["Q2_K", 300],
      ["Q4_K_M", 500],
      ["Q8_0", 800],
      ["FP16", 1600],
    ]);
  });

  it("prefers Q4_K_M when nothing is asked, with one projector and the metadata", () => {
    const s = selectHubFiles(REPO);
    expect(s).toMatchObject({
      ok: true,
      quant: "Q4_K_M",
      servedFile: "qwen2.5-0.5b-instruct-q4_k_m.gguf",
    });
    expect(paths(s)).toEqual([
      ".gitattributes",
      "README.md",
      "config.json",
      "qwen2.5-0.5b-instruct-q4_k_m.gguf",
      "mmproj-model-f16.gguf",
    ]);
  });

  it("matches the asked quant case-insensitively; a split is taken whole, served from part 1", () => {
    const s = selectHubFiles(REPO, { quant: "fp16" });
    expect(s).toMatchObject({
      ok: true,
      quant: "FP16",
      servedFile: "qwen2.5-0.5b-instruct-fp16-00001-of-00002.gguf",
    });
    expect(paths(s).filter((p) => p.includes("instruct"))).toEqual([
      "qwen2.5-0.5b-instruct-fp16-00001-of-00002.gguf",
      "qwen2.5-0.5b-instruct-fp16-00002-of-00002.gguf",
    ]);
    expect(paths(selectHubFiles(REPO, { quant: "Q8_0" }))).toContain(
      "qwen2.5-0.5b-instruct-q8_0.gguf",
    );
  });

  it("an unknown quant is refused with the available ones", () => {
    const s = selectHubFiles(REPO, { quant: "Q5_K_S" });
    expect(s.ok).toBe(false);
    expect(!s.ok && s.message).toBe(
      "no quantization Q5_K_S in the repo; available: Q2_K, Q4_K_M, Q8_0, FP16",
    );
  });

  it("without Q4_K_M takes the smallest; a single variant is taken whatever its tag", () => {
    const noQ4 = REPO.filter((x) => !x.path.includes("q4_k_m"));
    expect(selectHubFiles(noQ4)).toMatchObject({ ok: true, quant: "Q2_K" });
    const one = [f("tiny-llama.gguf", 10), f("a-extra.json", 5)];
    expect(selectHubFiles(one)).toMatchObject({
      ok: true,
      quant: null,
      servedFile: "tiny-llama.gguf",
    });
    // Several untagged variants: the stem names the one chosen (and can be asked for).
    const two = [f("model-a.gguf", 10), f("model-b.gguf", 5)];
    expect(selectHubFiles(two)).toMatchObject({ ok: true, quant: "model-b" });
    expect(selectHubFiles(two, { quant: "MODEL-A" })).toMatchObject({ ok: true, quant: "model-a" });
    expect(paths(selectHubFiles(one))).toEqual(["tiny-llama.gguf", "a-extra.json"]);
  });

  it("selects by the served file (the direct fallback fetches what the store registered)", () => {
    const s = selectHubFiles(REPO, { file: "qwen2.5-0.5b-instruct-q8_0.gguf" });
    expect(s).toMatchObject({ ok: true, quant: "Q8_0" });
    expect(selectHubFiles(REPO, { file: "gone.gguf" }).ok).toBe(false);
  });

  it("a repo without GGUF weights is taken whole; a quant cannot be asked of it", () => {
    const st = [f("config.json"), f("model-00001-of-00002.safetensors"), f("mtp.safetensors")];
    expect(selectHubFiles(st)).toMatchObject({ ok: true, quant: null, servedFile: null });
    expect(paths(selectHubFiles(st))).toHaveLength(3);
    expect(selectHubFiles(st, { quant: "Q4_K_M" }).ok).toBe(false);
  });
});
