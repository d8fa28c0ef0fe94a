// The gateway's operations in the OpenAPI document (GET /openapi.json): the state, placement,
// inference and admin routes of routes/, each with the schemas its handler validates with.
import { z } from "zod";
import {
  jsonAnswer,
  sseAnswer,
  ChatCompletionSchema,
  ChatRequestSchema,
  CompletionRequestSchema,
  DeleteInstanceResponseSchema,
  DrainResponseSchema,
  EmbeddingListSchema,
  EmbeddingRequestSchema,
  InstanceListSchema,
  ModelEntrySchema,
  ModelListResponseSchema,
  PingResponseSchema,
  PlaceRequestSchema,
  PlaceResponseSchema,
  PreviewQuerySchema,
  PreviewResponseSchema,
  RestartResponseSchema,
  StateDocumentSchema,
  StateQuerySchema,
  TextCompletionSchema,
  ResponsesRequestSchema,
  ResponseObjectSchema,
  ResponsesInputTokensRequestSchema,
  InputTokensSchema,
  MessagesRequestSchema,
  MessageObjectSchema,
  CountTokensRequestSchema,
  RerankRequestSchema,
  RerankResponseSchema,
} from "@ic/protocol";
import type { ApiOperation } from "@ic/protocol";

export const GATEWAY_OPERATIONS: readonly ApiOperation[] = [
  {
    method: "get",
    path: "/state",
    summary: "the replica of the control state and this node's live view",
    scope: "read",
    query: StateQuerySchema,
    responses: { "200": jsonAnswer("the state document", StateDocumentSchema) },
  },
  {
    method: "get",
    path: "/state/stream",
    summary:
      "the state document as Server-Sent Events: at once, on each change, every heartbeat period",
    scope: "read",
    query: StateQuerySchema,
    responses: { "200": sseAnswer("`event: state` with the document as data; held open") },
  },
  {
    method: "post",
    path: "/place_instance",
    summary: "place an instance of a registered model (synchronous; typed refusals)",
    scope: "admin",
    body: PlaceRequestSchema,
    responses: { "200": jsonAnswer("placed and sequenced", PlaceResponseSchema) },
  },
  {
    method: "get",
    path: "/instance/previews",
    summary: "every placement combination with its memory use or its refusal",
    scope: "read",
    query: PreviewQuerySchema,
    responses: { "200": jsonAnswer("the previews", PreviewResponseSchema) },
  },
  {
    method: "delete",
    path: "/instance/{instance_id}",
    summary: "tear an instance down and delete its deployment",
    scope: "admin",
    responses: { "200": jsonAnswer("deleted", DeleteInstanceResponseSchema) },
  },
  {
    method: "get",
    path: "/instances",
    summary: "the current instances",
    scope: "read",
    responses: { "200": jsonAnswer("the instances", InstanceListSchema) },
  },
  {
    method: "post",
    path: "/v1/chat/completions",
    summary: "OpenAI-compatible chat completion, routed to a ready instance",
    scope: "inference",
    headers: z.object({
      "x-ic-migrate": z
        .enum(["0", "1"])
        .describe(
          "stream migration for this request: 1 on, 0 off (default: chat.migrate_streams); docs/api.md",
        ),
    }),
    body: ChatRequestSchema,
    responses: {
      "200": {
        description: "the completion (JSON), or with stream: true a text/event-stream of chunks",
        schema: ChatCompletionSchema,
      },
    },
  },
  {
    method: "post",
    path: "/v1/completions",
    summary: "OpenAI-compatible text completion, routed as chat is",
    scope: "inference",
    body: CompletionRequestSchema,
    responses: {
      "200": {
        description: "the completion (JSON), or with stream: true a text/event-stream of chunks",
        schema: TextCompletionSchema,
      },
    },
  },
  {
    method: "post",
    path: "/v1/embeddings",
    summary: "OpenAI-compatible embeddings, from embed instances (kind: embed; routed as chat is)",
    scope: "inference",
    body: EmbeddingRequestSchema,
    responses: { "200": jsonAnswer("the embedding list", EmbeddingListSchema) },
  },
  {
    method: "post",
    path: "/v1/responses",
    summary:
      "OpenAI Responses API (stateless: no stored responses), from generate instances; tools pass through",
    scope: "inference",
    body: ResponsesRequestSchema,
    responses: {
      "200": {
        description:
          "the Response (JSON), or with stream: true a text/event-stream of named response.* events",
        schema: ResponseObjectSchema,
      },
    },
  },
  {
    method: "post",
    path: "/v1/responses/input_tokens",
    summary: "the input tokens a Responses request would take",
    scope: "inference",
    body: ResponsesInputTokensRequestSchema,
    responses: { "200": jsonAnswer("the count", InputTokensSchema) },
  },
  {
    method: "post",
    path: "/v1/messages",
    summary:
      "Anthropic Messages API, from generate instances; errors in Anthropic's envelope; x-api-key or a bearer token",
    scope: "inference",
    body: MessagesRequestSchema,
    responses: {
      "200": {
        description:
          "the message (JSON), or with stream: true a text/event-stream of Anthropic's named events",
        schema: MessageObjectSchema,
      },
    },
  },
  {
    method: "post",
    path: "/v1/messages/count_tokens",
    summary: "the input tokens an Anthropic Messages request would take",
    scope: "inference",
    body: CountTokensRequestSchema,
    responses: { "200": jsonAnswer("the count", InputTokensSchema) },
  },
  ...["/v1/rerank", "/v1/reranking", "/rerank", "/reranking"].map((path): ApiOperation => ({
    method: "post",
    path,
    summary:
      path === "/v1/rerank"
        ? "documents scored against a query, from rerank instances (kind: rerank)"
        : "the same as POST /v1/rerank (llama-server's other name for it)",
    scope: "inference",
    body: RerankRequestSchema,
    responses: { "200": jsonAnswer("the scores, best first", RerankResponseSchema) },
  })),
  {
    method: "get",
    path: "/v1/stream",
    summary:
      "a streamed answer read again through any node, from an offset, by the token that started it",
    scope: "inference",
    query: z.object({
      conversation_id: z.string().describe("the stream's X-Conversation-Id"),
      from: z
        .string()
        .optional()
        .describe("the engine offset to read from (an event's id); else Last-Event-ID, else 0"),
    }),
    responses: {
      "200": {
        description: "the rest of the stream (text/event-stream), its events with their ids",
        schema: z.string(),
      },
    },
  },
  {
    method: "delete",
    path: "/v1/stream",
    summary: "stop a stream's generation (its engine cancels it)",
    scope: "inference",
    query: z.object({ conversation_id: z.string() }),
    responses: {
      "200": jsonAnswer("stopped", z.object({ ok: z.literal(true), conversation_id: z.string() })),
    },
  },
  {
    method: "get",
    path: "/v1/models/{model_id}",
    summary: "one model, when it is ready and the token may use it",
    scope: "inference",
    responses: { "200": jsonAnswer("the model", ModelEntrySchema) },
  },
  {
    method: "get",
    path: "/v1/models",
    summary: "models with a ready instance that the token may use",
    scope: "inference",
    responses: { "200": jsonAnswer("the models", ModelListResponseSchema) },
  },
  {
    method: "post",
    path: "/admin/restart",
    summary: "restart this node's process image",
    scope: "admin",
    responses: { "202": jsonAnswer("restarting", RestartResponseSchema) },
  },
  {
    method: "post",
    path: "/admin/drain",
    summary: "drain this node (no new requests; those in flight finish), then stop it",
    scope: "admin",
    responses: { "202": jsonAnswer("draining", DrainResponseSchema) },
  },
  {
    method: "get",
    path: "/v1/ping",
    summary: "liveness ping (peers measure links with it)",
    scope: "public",
    responses: { "200": jsonAnswer("here", PingResponseSchema) },
  },
];
