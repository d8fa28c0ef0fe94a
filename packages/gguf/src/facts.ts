// Derives the handful of model facts placement and staging need from a GGUF header.
// Pure: works on already-read metadata, so it is tested by tables without touching files.
import type { GgufMetadata, GgufValue } from "./types.ts";

export interface ModelFacts {
  /** general.architecture, e.g. "llama"; null when absent. */
  readonly architecture: string | null;
  readonly name: string | null;
  /** Transformer layers ({arch}.block_count). */
  readonly blockCount: number | null;
  readonly contextLength: number | null;
  readonly embeddingLength: number | null;
  /** Per-layer arrays (some architectures) are reduced to their maximum. */
  readonly headCount: number | null;
  /** Defaults to headCount when the key is absent, as llama.cpp does. */
  readonly headCountKv: number | null;
  readonly feedForwardLength: number | null;
  /** {arch}.vocab_size, else the length of tokenizer.ggml.tokens. */
  readonly vocabSize: number | null;
  readonly tensorCount: number;
  /** Sum of all tensor data sizes (unpadded). */
  readonly weightsBytes: number;
  readonly fileBytes: number;
  readonly hasChatTemplate: boolean;
  /**
   * Its chat template reads `tools` (so llama-server can offer tools and parse calls): the same
   * test as llama.cpp's own first check, on the template's source.
   */
  readonly templateTakesTools: boolean;
}

export interface FactsInput {
  readonly metadata: GgufMetadata;
  readonly tensors: readonly { readonly byteSize: number }[];
  readonly fileBytes: number;
}

/** The value as a plain number when it is an integer scalar, or the maximum of an integer array. */
function integerOf(v: GgufValue | undefined): number | null {
  if (v === undefined) return null;
  switch (v.type) {
    case "u8":
    case "i8":
    case "u16":
    case "i16":
    case "u32":
    case "i32":
      return v.value;
    case "u64":
    case "i64":
      return v.value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v.value) : null;
    case "arr": {
      if (v.items === null || v.items.length === 0) return null;
      let max: number | null = null;
      for (const item of v.items) {
        const n =
          typeof item === "number" && Number.isInteger(item)
            ? item
            : typeof item === "bigint"
              ? Number(item)
              : null;
        if (n === null) return null;
        max = max === null ? n : Math.max(max, n);
      }
      return max;
    }
    default:
      return null;
  }
}

export function metaString(metadata: GgufMetadata, key: string): string | null {
  const v = metadata.get(key);
  return v?.type === "str" ? v.value : null;
}

export function metaInteger(metadata: GgufMetadata, key: string): number | null {
  return integerOf(metadata.get(key));
}

export function modelFacts({ metadata, tensors, fileBytes }: FactsInput): ModelFacts {
  const architecture = metaString(metadata, "general.architecture");
  const arch = (suffix: string): number | null =>
    architecture === null ? null : metaInteger(metadata, `${architecture}.${suffix}`);
  const headCount = arch("attention.head_count");
  const tokens = metadata.get("tokenizer.ggml.tokens");
  const template = metaString(metadata, "tokenizer.chat_template");
  return {
    architecture,
    name: metaString(metadata, "general.name"),
    blockCount: arch("block_count"),
    contextLength: arch("context_length"),
    embeddingLength: arch("embedding_length"),
    headCount,
    headCountKv: arch("attention.head_count_kv") ?? headCount,
    feedForwardLength: arch("feed_forward_length"),
    vocabSize: arch("vocab_size") ?? (tokens?.type === "arr" ? tokens.length : null),
    tensorCount: tensors.length,
    weightsBytes: tensors.reduce((sum, t) => sum + t.byteSize, 0),
    fileBytes,
    hasChatTemplate: template !== null && template.length > 0,
    templateTakesTools: template !== null && /\btools\b/.test(template),
  };
}
