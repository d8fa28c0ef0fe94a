// Request and response bodies of the node HTTP API that no other module of the protocol defines:
// the gateway's request schemas (validated at the edge with exactly these) and the JSON answers of
// the smaller endpoints. The OpenAPI document (openapi.ts, served at GET /openapi.json) is built from
// these and the other schemas of this package.
import { z } from "zod";
import { InstanceIdSchema, ModelIdSchema } from "./ids.ts";
import { InstanceSchema, KeepAliveSchema, ShardingSchema } from "./cluster.ts";
import { InstanceKindSchema } from "./instance-kinds.ts";
import { PullSchema } from "./store.ts";
import { ERROR_CODES } from "./errors.ts";

// ---- requests ----

const ContentPart = z.object({ type: z.string() }).passthrough();
const MessageSchema = z
  .object({
    role: z.string().min(1),
    content: z.union([z.string(), z.array(ContentPart), z.null()]),
  })
  .passthrough();

/** OpenAI's function tool; llama-server answers a malformed one with a 500, so it is checked here. */
const ToolSchema = z
  .object({
    type: z.literal("function"),
    function: z
      .object({
        name: z.string().min(1).max(256),
        description: z.string().optional(),
        parameters: z.record(z.string(), z.unknown()).optional(),
      })
      .passthrough(),
  })
  .passthrough();

/** POST /v1/chat/completions: the fields the gateway checks; the others pass through to the engine. */
export const ChatRequestSchema = z
  .object({
    model: z.string().min(1).max(300),
    messages: z.array(MessageSchema).min(1),
    max_tokens: z.number().int().positive().optional(),
    max_completion_tokens: z.number().int().positive().optional(),
    stream: z.boolean().optional(),
    temperature: z.number().min(0).max(2).optional(),
    top_p: z.number().min(0).max(1).optional(),
    n: z.literal(1).optional(),
    tools: z.array(ToolSchema).max(1024).optional(),
  })
  .passthrough();

/**
 * POST /v1/completions (OpenAI's legacy text completion): the fields the gateway checks; the others
 * pass through to the engine. `prompt` is a string, or an array of strings or token ids.
 */
export const CompletionRequestSchema = z
  .object({
    model: z.string().min(1).max(300),
    prompt: z.union([
      z.string(),
      z
        .array(z.union([z.string(), z.number().int().nonnegative()]))
        .min(1)
        .max(4096),
    ]),
    max_tokens: z.number().int().positive().optional(),
    stream: z.boolean().optional(),
    temperature: z.number().min(0).max(2).optional(),
    top_p: z.number().min(0).max(1).optional(),
    n: z.literal(1).optional(),
  })
  .passthrough();

/**
 * POST /v1/embeddings: the fields the gateway checks; the others (`encoding_format`, `dimensions`…)
 * pass through to the engine. `input` is a string, an array of strings, or token ids.
 */
export const EmbeddingRequestSchema = z
  .object({
    model: z.string().min(1).max(300),
    input: z.union([
      z.string(),
      z.array(z.string()).min(1).max(2048),
      z.array(z.number().int().nonnegative()).min(1),
      z.array(z.array(z.number().int().nonnegative()).min(1)).min(1).max(2048),
    ]),
    encoding_format: z.enum(["float", "base64"]).optional(),
  })
  .passthrough();

/** The answer of POST /v1/embeddings (OpenAI's list; the engine's, passed through). */
export const EmbeddingListSchema = z.object({
  object: z.literal("list"),
  model: z.string(),
  data: z.array(
    z.object({
      object: z.literal("embedding"),
      index: z.number().int(),
      /** Floats, or base64 of little-endian float32 with encoding_format "base64". */
      embedding: z.union([z.array(z.number()), z.string()]),
    }),
  ),
  usage: z.object({ prompt_tokens: z.number().int(), total_tokens: z.number().int() }),
});

export const PlaceRequestSchema = z
  .object({
    model_id: ModelIdSchema,
    min_nodes: z.number().int().min(1).max(1024).default(1),
    excluded_nodes: z.array(z.string().max(128)).max(1024).default([]),
    sharding: ShardingSchema.default("Pipeline"),
    instance_type: z.enum(["llama"]).default("llama"),
    /**
     * What its instances serve (instance-kinds.ts): generate (chat, completions, Responses,
     * Messages), embed (/v1/embeddings, llama-server --embeddings pooled per the model's config) or
     * rerank (/v1/rerank, --reranking). Default generate.
     */
    kind: InstanceKindSchema.optional(),
    /** Before kinds: `true` asks for kind embed. */
    embeddings: z.boolean().optional(),
    /**
     * Instances of the model to keep, each on nodes none of the others uses (anti-affinity); the
     * master re-places a lost one away from its siblings. All are placed now, or none is.
     */
    replicas: z.number().int().min(1).max(16).default(1),
    /**
     * Unload it after it had no request for this long (Ollama's keep_alive: seconds, or "30s",
     * "5m", "1h"; 0 once its answers are done). Absent or -1: never (docs/capacity.md).
     */
    keep_alive: KeepAliveSchema.optional(),
    /**
     * Replicas that follow load (docs/capacity.md): with `max_replicas`, the placement starts with
     * `min_replicas` (default 1; `replicas` is then ignored) and grows by one while its requests in
     * flight stay above `scale_up_at` (default 4) per ready replica, shrinking after a quiet window.
     */
    min_replicas: z.number().int().min(1).max(16).optional(),
    max_replicas: z.number().int().min(1).max(16).optional(),
    scale_up_at: z.number().positive().max(1024).optional(),
  })
  .strict();
export type PlaceRequest = z.infer<typeof PlaceRequestSchema>;

export const PreviewQuerySchema = z.object({
  model_id: ModelIdSchema,
  excluded_node_ids: z.string().optional(),
});

// ---- responses ----

/** Every error answer (docs/api.md, "Error envelope"). */
export const ErrorEnvelopeSchema = z.object({
  error: z.object({
    code: z.enum(ERROR_CODES),
    message: z.string(),
    type: z.string(),
    retryable: z.boolean(),
    param: z.null(),
    details: z.record(z.string(), z.unknown()).optional(),
  }),
});

export const PlaceResponseSchema = z.object({
  ok: z.literal(true),
  index: z.number().int(),
  /** The (first) instance placed. */
  instance: InstanceSchema,
  /** With `replicas` > 1: every replica placed, the first included. */
  instances: z.array(InstanceSchema).optional(),
});

const PreviewNodeSchema = z
  .object({
    node_id: z.string(),
    name: z.string(),
    total_bytes: z.number().nullable(),
    reported_free_bytes: z.number().nullable(),
    reserved_bytes: z.number(),
    free_bytes: z.number().nullable(),
    candidate: z.boolean(),
  })
  .passthrough();
export const PreviewResponseSchema = z.object({
  model_id: ModelIdSchema,
  excluded_node_ids: z.array(z.string()),
  nodes: z.array(PreviewNodeSchema),
  previews: z.array(
    z.object({ sharding: ShardingSchema, nodes: z.number().int(), ok: z.boolean() }).passthrough(),
  ),
});

export const DeleteInstanceResponseSchema = z.object({
  ok: z.literal(true),
  index: z.number().int(),
  instance_id: InstanceIdSchema,
});
export const InstanceListSchema = z.object({ instances: z.array(InstanceSchema) });

/** GET /v1/models/{id}: one entry of the list. */
export const ModelEntrySchema = z.object({
  id: z.string(),
  object: z.literal("model"),
  created: z.literal(0),
  owned_by: z.literal("cluster"),
  /** The kinds of its ready instances (instance-kinds.ts), in the table's order. */
  kinds: z.array(InstanceKindSchema),
  /** The context its instances run with (the smallest of them), else the model's own. */
  context_length: z.number().int().positive().optional(),
  /** The same, under vLLM's name (which several clients read). */
  max_model_len: z.number().int().positive().optional(),
  /** Ollama's words: completion, embedding, rerank, tools, vision. */
  capabilities: z.array(z.string()),
  /**
   * Listed because a request loads it (on demand, docs/capacity.md): false while nothing serves it,
   * true once loaded. Absent for a model an operator placed.
   */
  loaded: z.boolean().optional(),
});
export type ModelEntry = z.infer<typeof ModelEntrySchema>;

export const ModelListResponseSchema = z.object({
  object: z.literal("list"),
  data: z.array(ModelEntrySchema),
});

/** POST /v1/completions without streaming: the engine's body, its id replaced. */
export const TextCompletionSchema = z
  .object({
    id: z.string(),
    object: z.string(),
    choices: z.array(z.object({ index: z.number(), text: z.string() }).passthrough()),
  })
  .passthrough();

/** POST /v1/chat/completions without streaming: the engine's body, its id replaced. */
export const ChatCompletionSchema = z
  .object({
    id: z.string(),
    object: z.string(),
    choices: z.array(z.object({ index: z.number(), message: z.unknown() }).passthrough()),
  })
  .passthrough();

export const RestartResponseSchema = z.object({
  ok: z.literal(true),
  restarting: z.literal(true),
  node: z.string(),
});

/** POST /admin/drain: accepted; the node drains, then stops. */
export const DrainResponseSchema = z.object({
  ok: z.literal(true),
  draining: z.literal(true),
  node: z.string(),
});
export const PingResponseSchema = z.object({ ok: z.literal(true), peer_key: z.string() });
export const HealthResponseSchema = z.object({
  ok: z.literal(true),
  node: z.string(),
  session_id: z.string(),
  is_master: z.boolean(),
});

export const PurgeResponseSchema = z.object({
  ok: z.boolean(),
  model_id: ModelIdSchema.nullable(),
  deleted_bytes: z.number(),
  not_answered: z.array(z.string()),
  nodes: z.array(
    z
      .object({
        peer_key: z.string(),
        name: z.string(),
        ok: z.boolean(),
        deleted: z.array(z.string()),
        freed_bytes: z.number(),
      })
      .passthrough(),
  ),
});

export const PullResponseSchema = z.object({ pull: PullSchema });
/** GET /store/host: the node that holds the store (where uploads go). */
export const StoreHostResponseSchema = z.object({ name: z.string(), api_url: z.string() });
/** PUT /store/uploads/{org}/{name}/files/{path}: one file received into the upload area. */
export const UploadFileResponseSchema = z.object({
  model_id: z.string(),
  file: z.object({ path: z.string(), bytes: z.number().int(), sha256: z.string() }),
});
/** POST /store/uploads/{org}/{name}/commit: the files moved into the store. */
export const UploadCommitResponseSchema = z.object({
  model_id: z.string(),
  files: z.array(z.object({ path: z.string(), bytes: z.number().int() })),
});
/** DELETE /store/uploads/{org}/{name}: an upload dropped. */
export const UploadAbortResponseSchema = z.object({
  model_id: z.string(),
  aborted: z.literal(true),
});
/** DELETE /store/pulls/{org}/{name}: a live pull cancelled, or a finished one dismissed. */
export const PullCancelResponseSchema = z.object({ pull: PullSchema, dismissed: z.boolean() });
export const PullListResponseSchema = z.object({ pulls: z.array(PullSchema) });
export const RemoveModelResponseSchema = z.object({ ok: z.literal(true), model_id: ModelIdSchema });

export const NodeLogsResponseSchema = z.object({
  node: z.string(),
  lines: z.array(z.record(z.string(), z.unknown())),
  buffer: z.object({
    lines: z.number(),
    bytes: z.number(),
    written: z.number(),
    evicted: z.number(),
    subscribers: z.number(),
    max_lines: z.number(),
    max_bytes: z.number(),
  }),
});

export const RunnerLogsResponseSchema = z.object({
  instance_id: InstanceIdSchema,
  model_id: ModelIdSchema,
  rank: z.number().int(),
  node: z.object({ node_id: z.string(), name: z.string(), peer_key: z.string() }),
  file: z.string(),
  size_bytes: z.number(),
  modified_at: z.string(),
  truncated: z.boolean(),
  lines: z.array(z.string()),
});

export const TracingStatusSchema = z.object({
  enabled: z.boolean(),
  retention_days: z.number(),
  dir: z.string(),
  written: z.number(),
  dropped: z.number(),
  pending: z.number(),
});
export const TracingBodySchema = z.object({ enabled: z.boolean() }).strict();
const TraceEntrySchema = z.object({
  taskId: z.string(),
  createdAt: z.string(),
  modelId: z.string(),
});
export const TraceListSchema = z.object({ traces: z.array(TraceEntrySchema) });
export const ClusterTraceListSchema = z.object({
  traces: z.array(TraceEntrySchema.extend({ node: z.string() })),
  nodes: z.array(z.string()),
  unreachable: z.array(z.object({ node: z.string(), error: z.string() })),
});
