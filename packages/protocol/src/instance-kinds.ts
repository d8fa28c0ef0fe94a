// What an instance is for: one kind per instance (generate, embed or rerank), and one table that says,
// per kind, how its engine is started, which API paths it serves and how people see it. The gateway
// routes by this table, the worker starts engines by it, the CLI and dashboard show it: a fourth kind
// is one row here, the schema of its endpoint's body, and that endpoint's row in the gateway's
// ENDPOINTS (with its OpenAPI operation, which a test asks for).
import { z } from "zod";

export const INSTANCE_KINDS = ["generate", "embed", "rerank"] as const;
export const InstanceKindSchema = z.enum(INSTANCE_KINDS);
export type InstanceKind = z.infer<typeof InstanceKindSchema>;

export interface InstanceKindInfo {
  /** llama-server's flags for this mode; `pooling` is the model's (model.json), mean when unset. */
  readonly engineArgs: (pooling: string | undefined) => readonly string[];
  /** The gateway paths answered by instances of this kind (each path belongs to one kind). */
  readonly paths: readonly string[];
  /** One word for tables (`ic instances`, the dashboard). */
  readonly label: string;
  /** What it serves, in words (help texts, errors). */
  readonly serves: string;
  /** Its capability in Ollama's words (GET /v1/models lists a model's `capabilities`). */
  readonly capability: string;
}

export const INSTANCE_KIND_TABLE: Readonly<Record<InstanceKind, InstanceKindInfo>> = {
  generate: {
    engineArgs: () => [],
    paths: [
      "/v1/chat/completions",
      "/v1/completions",
      "/v1/responses",
      "/v1/responses/input_tokens",
      "/v1/messages",
      "/v1/messages/count_tokens",
    ],
    label: "generate",
    serves: "chat, completions, Responses and Anthropic Messages",
    capability: "completion",
  },
  embed: {
    // OpenAI's /v1/embeddings needs a pooled vector per input (not `none`).
    engineArgs: (pooling) => ["--embeddings", "--pooling", pooling ?? "mean"],
    paths: ["/v1/embeddings"],
    label: "embed",
    serves: "/v1/embeddings",
    capability: "embedding",
  },
  rerank: {
    engineArgs: () => ["--reranking"],
    paths: ["/v1/rerank", "/v1/reranking", "/rerank", "/reranking"],
    label: "rerank",
    serves: "/v1/rerank",
    capability: "rerank",
  },
};

/** The kind whose instances answer `path`, if any. */
export function kindForPath(path: string): InstanceKind | undefined {
  return INSTANCE_KINDS.find((k) => INSTANCE_KIND_TABLE[k].paths.includes(path));
}

/**
 * An instance's or deployment's kind: its `kind`, else the field that came before it
 * (`embeddings: true` in records written before kinds), else generate.
 */
export function kindOf(x: {
  readonly kind?: InstanceKind | undefined;
  readonly embeddings?: boolean | undefined;
}): InstanceKind {
  return x.kind ?? (x.embeddings === true ? "embed" : "generate");
}

/** A placement request's `kind` and `embeddings` (the older flag) as one kind; null when they disagree. */
export function requestedKind(
  kind: InstanceKind | undefined,
  embeddings: boolean | undefined,
): InstanceKind | null {
  if (kind === undefined) return embeddings === true ? "embed" : "generate";
  if (embeddings === true && kind !== "embed") return null;
  return kind;
}
