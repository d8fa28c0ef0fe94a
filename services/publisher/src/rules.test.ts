import { describe, expect, it } from "vitest";
import type { RepoId } from "./model-ref.ts";
import {
  assistantCandidates,
  cardBaseModel,
  catalogKey,
  detectQuant,
  detectTier,
  findMtpKeys,
  layerCounts,
  outputName,
  sidecarRepoFor,
} from "./rules.ts";

const id = (s: string): RepoId => s as RepoId;

describe("findMtpKeys", () => {
  const deepseek = { num_hidden_layers: 2, num_nextn_predict_layers: 1 };
  it.each<[string, string[], Record<string, unknown> | null, string[]]>([
    [
      "layers at or beyond num_hidden_layers when nextn layers are declared",
      [
        "model.layers.0.mlp.up_proj.weight",
        "model.layers.1.x",
        "model.layers.2.eh_proj.weight",
        "model.layers.3.enorm.weight",
        "lm_head.weight",
      ],
      deepseek,
      ["model.layers.2.eh_proj.weight", "model.layers.3.enorm.weight"],
    ],
    [
      "no extra layers without num_nextn_predict_layers",
      ["model.layers.2.x"],
      { num_hidden_layers: 2 },
      [],
    ],
    [
      "no extra layers without num_hidden_layers",
      ["model.layers.9.x"],
      { num_nextn_predict_layers: 1 },
      [],
    ],
    [
      "nextn = 0 means none",
      ["model.layers.2.x"],
      { num_hidden_layers: 2, num_nextn_predict_layers: 0 },
      [],
    ],
    [
      "anything under an mtp module, with or without config",
      ["mtp.fc.weight", "model.mtp.layers.0.w", "mtp_head.weight", "model.layers.0.mtpx"],
      null,
      ["model.mtp.layers.0.w", "mtp.fc.weight", "mtp_head.weight"],
    ],
    [
      "multimodal wrappers: language_model prefix and text_config",
      ["model.language_model.layers.4.w", "model.language_model.layers.3.w"],
      { text_config: { num_hidden_layers: 4, num_nextn_predict_layers: 1 } },
      ["model.language_model.layers.4.w"],
    ],
    [
      "Qwen3-Next counts mtp_num_hidden_layers",
      ["model.layers.3.w"],
      { num_hidden_layers: 3, mtp_num_hidden_layers: 1 },
      ["model.layers.3.w"],
    ],
    [
      "a Gemma-type model has none",
      ["model.layers.0.w", "model.norm.weight"],
      { num_hidden_layers: 1 },
      [],
    ],
  ])("%s", (_name, keys, config, expected) => {
    expect(findMtpKeys(keys, config)).toEqual(expected);
  });

  it("reads layer counts from the top level first", () => {
    expect(layerCounts({ num_hidden_layers: 61, num_nextn_predict_layers: 1 })).toEqual({
      hidden: 61,
      nextn: 1,
    });
    expect(layerCounts(null)).toEqual({ hidden: null, nextn: 0 });
  });
});

describe("detectQuant", () => {
  it.each<[string, string, string[], Record<string, unknown> | null, string]>([
    ["q4k from the repo name", "Tiny-MTP-Q4K", [], null, "q4k"],
    ["q4k from Q4_K_M", "Qwen3-30B-A3B-Q4_K_M-GGUF", [], null, "q4k"],
    ["q8k from the name", "Tiny-Q8_K", [], null, "q8k"],
    ["q4k from a gguf file name", "Tiny-GGUF", ["README.md", "tiny-Q4_K_S.gguf"], null, "q4k"],
    ["fp8 from the name", "DeepSeek-V3-FP8", [], null, "fp8"],
    [
      "quant_method from the config",
      "Tiny",
      [],
      { quantization_config: { quant_method: "FP8" } },
      "fp8",
    ],
    [
      "other quant methods as named",
      "Tiny",
      [],
      { quantization_config: { quant_method: "awq" } },
      "awq",
    ],
    [
      "torch_dtype for full precision",
      "Tiny",
      ["model.safetensors"],
      { torch_dtype: "bfloat16" },
      "bf16",
    ],
    ["text_config dtype", "Tiny", [], { text_config: { torch_dtype: "float16" } }, "fp16"],
    ["unknown when nothing says", "Tiny", ["README.md"], null, "unknown"],
    ["words that merely contain the letters do not count", "Q4Karma", [], null, "unknown"],
  ])("%s", (_n, name, files, config, expected) => {
    expect(detectQuant({ name, files, config })).toBe(expected);
  });
});

describe("naming rules", () => {
  it("detects the expert-server tier from the name or the card", () => {
    expect(detectTier("Tiny-expert-server-Q4K", null)).toBe("expert-server");
    expect(detectTier("Tiny-ExpertServer", null)).toBe("expert-server");
    expect(detectTier("Tiny-Q4K", { tier: "expert-server" })).toBe("expert-server");
    expect(detectTier("Tiny-Q4K", { tier: "bogus" })).toBe("full");
  });

  it("takes the first base_model of a card, string or list", () => {
    expect(cardBaseModel({ base_model: "a/b" })).toBe("a/b");
    expect(cardBaseModel({ base_model: ["a/c", "a/d"] })).toBe("a/c");
    expect(cardBaseModel({ base_model: "not a repo" })).toBeNull();
    expect(cardBaseModel(null)).toBeNull();
  });

  it("derives sidecar, key, output name and assistant candidates", () => {
    expect(sidecarRepoFor(id("quant-org/Tiny-Q4K"), id("acme/Tiny"))).toBe("quant-org/Tiny-MTP");
    expect(catalogKey(id("quant-org/Tiny_MTP.v2-Q4K"))).toBe("tiny-mtp-v2-q4k");
    expect(outputName(id("quant-org/Tiny-Q4K"))).toBe("quant-org--Tiny-Q4K");
    expect(assistantCandidates(id("q/T-Q4K"), id("a/T"))).toEqual([
      "q/T-Q4K-assistant",
      "a/T-assistant",
    ]);
    expect(assistantCandidates(id("a/T"), id("a/T"))).toEqual(["a/T-assistant"]);
  });
});
