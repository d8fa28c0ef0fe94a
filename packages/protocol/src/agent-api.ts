// The request bodies of the APIs beyond OpenAI chat that the gateway serves as llama-server does:
// OpenAI Responses (+ input_tokens), Anthropic Messages (+ count_tokens) and rerank. Like the chat
// schema, each checks the fields the gateway or the engine would otherwise fail on badly (a 500, or a
// silent default) and passes the others through to the engine.
import { z } from "zod";

const Model = z.string().min(1).max(300);

// ---- OpenAI Responses ----

/** An input item: a message (`role` + `content`), a function call or its output (`type`). */
const ResponsesInputItem = z
  .object({ type: z.string().min(1).optional(), role: z.string().min(1).optional() })
  .passthrough()
  .refine((i) => i.type !== undefined || i.role !== undefined, {
    message: "an input item needs a type or a role",
  });

/** A Responses tool: `{type: "function", name, parameters}` (flat, unlike chat's). */
const ResponsesTool = z
  .object({
    type: z.string().min(1),
    name: z.string().min(1).max(256).optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
  })
  .passthrough()
  .refine((t) => t.type !== "function" || t.name !== undefined, {
    message: "a function tool needs a name",
  });

const ResponsesFields = {
  model: Model,
  input: z.union([z.string(), z.array(ResponsesInputItem).min(1).max(100_000)]),
  instructions: z.string().optional(),
  tools: z.array(ResponsesTool).max(1024).optional(),
};

/** POST /v1/responses: OpenAI's Responses API, stateless (no `previous_response_id` store). */
export const ResponsesRequestSchema = z
  .object({
    ...ResponsesFields,
    max_output_tokens: z.number().int().positive().optional(),
    stream: z.boolean().optional(),
    temperature: z.number().min(0).max(2).optional(),
    top_p: z.number().min(0).max(1).optional(),
  })
  .passthrough();

/** POST /v1/responses/input_tokens: the tokens a Responses request's input would take. */
export const ResponsesInputTokensRequestSchema = z.object(ResponsesFields).passthrough();

// ---- Anthropic Messages ----

const AnthropicBlock = z.object({ type: z.string().min(1) }).passthrough();
const AnthropicMessage = z
  .object({
    role: z.enum(["user", "assistant"]),
    content: z.union([z.string(), z.array(AnthropicBlock).min(1)]),
  })
  .passthrough();
const AnthropicTool = z
  .object({
    name: z.string().min(1).max(256),
    input_schema: z.record(z.string(), z.unknown()).optional(),
  })
  .passthrough();

const MessagesFields = {
  model: Model,
  messages: z.array(AnthropicMessage).min(1).max(100_000),
  system: z.union([z.string(), z.array(AnthropicBlock)]).optional(),
  tools: z.array(AnthropicTool).max(1024).optional(),
};

/** POST /v1/messages: Anthropic's Messages API (`max_tokens` is required there, and here). */
export const MessagesRequestSchema = z
  .object({
    ...MessagesFields,
    max_tokens: z.number().int().positive(),
    stream: z.boolean().optional(),
    temperature: z.number().min(0).max(1).optional(),
    top_p: z.number().min(0).max(1).optional(),
    top_k: z.number().int().nonnegative().optional(),
    stop_sequences: z.array(z.string()).max(64).optional(),
  })
  .passthrough();

/** POST /v1/messages/count_tokens: the input tokens a Messages request would take. */
export const CountTokensRequestSchema = z.object(MessagesFields).passthrough();

// ---- rerank ----

/**
 * POST /v1/rerank (also /v1/reranking, /rerank, /reranking): documents scored against a query by
 * a reranking instance. `texts` is TEI's name for `documents` (the answer then has TEI's shape).
 */
export const RerankRequestSchema = z
  .object({
    model: Model,
    query: z.string(),
    documents: z.array(z.string()).min(1).max(4096).optional(),
    texts: z.array(z.string()).min(1).max(4096).optional(),
    top_n: z.number().int().positive().optional(),
  })
  .passthrough()
  .refine((r) => (r.documents === undefined) !== (r.texts === undefined), {
    message: "send documents (or texts, TEI's name for them), one of the two",
    path: ["documents"],
  });

// ---- answers (the engine's, passed through with the id replaced where it has one) ----

/** POST /v1/responses without streaming: a Response object. */
export const ResponseObjectSchema = z
  .object({
    id: z.string(),
    object: z.literal("response"),
    status: z.string(),
    output: z.array(z.object({ type: z.string() }).passthrough()),
  })
  .passthrough();

/** POST /v1/messages without streaming: an Anthropic message. */
export const MessageObjectSchema = z
  .object({
    id: z.string(),
    type: z.literal("message"),
    role: z.literal("assistant"),
    content: z.array(z.object({ type: z.string() }).passthrough()),
    stop_reason: z.string().nullable(),
    usage: z.object({ input_tokens: z.number(), output_tokens: z.number() }).passthrough(),
  })
  .passthrough();

/** The token counters' answer (Responses adds `object: "response.input_tokens"`). */
export const InputTokensSchema = z.object({ input_tokens: z.number().int() }).passthrough();

/** POST /v1/rerank: the scores, best first (with `texts`, TEI's array of {index, score}). */
export const RerankResponseSchema = z.union([
  z
    .object({
      results: z.array(z.object({ index: z.number(), relevance_score: z.number() }).passthrough()),
    })
    .passthrough(),
  z.array(z.object({ index: z.number(), score: z.number() }).passthrough()),
]);
