// Table tests for modelFacts: which keys feed which fact, and the fallbacks llama.cpp applies.
import { describe, expect, test } from "vitest";
import { modelFacts, type ModelFacts } from "./facts.ts";
import type { GgufValue } from "./types.ts";

const u32 = (value: number): GgufValue => ({ type: "u32", value });
const str = (value: string): GgufValue => ({ type: "str", value });

function facts(
  entries: [string, GgufValue][],
  byteSizes: number[] = [],
  fileBytes = 1000,
): ModelFacts {
  return modelFacts({
    metadata: new Map(entries),
    tensors: byteSizes.map((byteSize) => ({ byteSize })),
    fileBytes,
  });
}

describe("modelFacts", () => {
  test("reads the architecture-prefixed keys", () => {
    const f = facts(
      [
        ["general.architecture", str("qwen3")],
        ["general.name", str("Qwen3 8B")],
        ["qwen3.block_count", u32(36)],
        ["qwen3.context_length", u32(40960)],
        ["qwen3.embedding_length", u32(4096)],
        ["qwen3.attention.head_count", u32(32)],
        ["qwen3.attention.head_count_kv", u32(8)],
        ["qwen3.feed_forward_length", u32(12288)],
        ["qwen3.vocab_size", u32(151936)],
        ["llama.block_count", u32(99)], // another architecture's key is ignored
        ["tokenizer.chat_template", str("{{ messages }}")],
      ],
      [100, 200, 300],
      4096,
    );
    expect(f).toEqual({
      architecture: "qwen3",
      name: "Qwen3 8B",
      blockCount: 36,
      contextLength: 40960,
      embeddingLength: 4096,
      headCount: 32,
      headCountKv: 8,
      feedForwardLength: 12288,
      vocabSize: 151936,
      tensorCount: 3,
      weightsBytes: 600,
      fileBytes: 4096,
      hasChatTemplate: true,
      templateTakesTools: false,
    });
  });

  test.each<[string, [string, GgufValue][], Partial<ModelFacts>]>([
    [
      "head_count_kv defaults to head_count",
      [
        ["general.architecture", str("llama")],
        ["llama.attention.head_count", u32(8)],
      ],
      { headCount: 8, headCountKv: 8 },
    ],
    [
      "vocab size falls back to the token list length",
      [
        ["general.architecture", str("llama")],
        ["tokenizer.ggml.tokens", { type: "arr", itemType: "str", length: 32000, items: null }],
      ],
      { vocabSize: 32000 },
    ],
    [
      "per-layer arrays reduce to their maximum",
      [
        ["general.architecture", str("gemma3n")],
        [
          "gemma3n.feed_forward_length",
          { type: "arr", itemType: "i32", length: 3, items: [8192, 16384, 8192] },
        ],
        [
          "gemma3n.attention.head_count_kv",
          { type: "arr", itemType: "u32", length: 2, items: [0, 4] },
        ],
      ],
      { feedForwardLength: 16384, headCountKv: 4 },
    ],
    [
      "64-bit integers are accepted",
      [
        ["general.architecture", str("llama")],
        ["llama.context_length", { type: "u64", value: 131072n }],
      ],
      { contextLength: 131072 },
    ],
    [
      "a wrongly typed value is not a fact",
      [
        ["general.architecture", str("llama")],
        ["llama.block_count", str("32")],
      ],
      { blockCount: null },
    ],
    [
      "an empty chat template does not count",
      [["tokenizer.chat_template", str("")]],
      { hasChatTemplate: false, templateTakesTools: false },
    ],
    [
      "a template that reads tools takes tools",
      [["tokenizer.chat_template", str("{%- if tools -%}{{ tools | tojson }}{%- endif -%}")]],
      { hasChatTemplate: true, templateTakesTools: true },
    ],
    [
      "no architecture means no architecture facts",
      [["llama.block_count", u32(32)]],
      { architecture: null, blockCount: null, headCountKv: null },
    ],
  ])("%s", (_, entries, expected) => {
    expect(facts(entries)).toMatchObject(expected);
  });
});
