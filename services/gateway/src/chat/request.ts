// A chat request's vocabulary and its first step, validate: the endpoints and their body schemas,
// the request's bounds (the config's chat section), what every try of a request shares, and the
// content checks llama-server would otherwise answer with a 500.
import type { PromptCacheMap, Prediction } from "../prompt-cache.ts";
import type { EngineSlots } from "../engine-slots.ts";
import type { PromptBlocks } from "../prompt-blocks.ts";
import type { Sink } from "./sink.ts";
import type { HandoverWatch, KvMovePort, KvMoveStats } from "./handover.ts";
import type { Context } from "hono";
import type { z } from "zod";
import {
  ChatRequestSchema,
  CompletionRequestSchema,
  CountTokensRequestSchema,
  EmbeddingRequestSchema,
  INSTANCE_KIND_TABLE,
  kindForPath,
  kindOf,
  MessagesRequestSchema,
  RerankRequestSchema,
  ResponsesInputTokensRequestSchema,
  ResponsesRequestSchema,
  ServiceError,
} from "@ic/protocol";
import type { InstanceKind } from "@ic/protocol";
import type {
  ChatEvent,
  ChatObserver,
  ChatRequestSeen,
  CommandId,
  EngineTimings,
  ModelRecord,
} from "@ic/protocol";
import type { Logger } from "@ic/log";
import { ChatSchema } from "@ic/config";
import type { ClusterView } from "@ic/protocol";
import type { RequestLoad } from "../request-load.ts";
import type { ReadyInstance } from "../readiness.ts";
import type { TaskReports } from "../task-reports.ts";
import type { ApiToken } from "@ic/http";
import type { MigrationReport } from "../migration.ts";
import type { StreamDirectory } from "../streams/directory.ts";

/** What the chat and the text completion endpoints share: the fields the gateway reads. */
export type InferenceRequest = {
  model: string;
  stream?: boolean | undefined;
  max_tokens?: number | undefined;
  max_completion_tokens?: number | undefined;
} & Record<string, unknown>;

/**
 * The SSE dialect of an endpoint's streams: OpenAI's `data:` events (chat, completions), the
 * Responses API's named events (`event: response.…`), or Anthropic's (`event: message_start`…,
 * errors as `event: error`). It says where the usage is and how an error event looks.
 */
export type StreamStyle = "openai" | "responses" | "anthropic";

/** One inference endpoint: how its body is checked, which instances serve it, how its answer reads. */
export interface Endpoint {
  /** The gateway's path, and the engine's: llama-server serves each of these paths itself. */
  readonly path: string;
  readonly schema: z.ZodType<InferenceRequest>;
  /** The command id's prefix (the answer's id when `rewritesId`: OpenAI's `chatcmpl-`…). */
  readonly idPrefix: string;
  /** The instances that serve it (INSTANCE_KIND_TABLE's paths say which). */
  readonly kind: InstanceKind;
  /** The answer's `id` becomes the command id (completions, responses, messages). */
  readonly rewritesId: boolean;
  /** The body's bound on generated tokens that chat.default_max_tokens fills when absent. */
  readonly maxTokensField: "max_tokens" | "max_output_tokens" | undefined;
  readonly style: StreamStyle;
  /**
   * Its answer's usage is work the engine did (prompt and generated tokens, counted in metrics and
   * against a token's tokens_per_minute); false for the token counters, which only tokenize.
   */
  readonly usage: boolean;
}

type EndpointRow = Omit<Endpoint, "kind">;

/** The row with its kind from the kinds table: a path no kind serves is a programming error. */
function endpoint(row: EndpointRow): Endpoint {
  const kind = kindForPath(row.path);
  if (!kind) throw new Error(`no instance kind serves ${row.path} (INSTANCE_KIND_TABLE)`);
  return { ...row, kind };
}

/** An endpoint answered with one JSON body that has no id of its own (a list, a count). */
const plain = {
  rewritesId: false,
  maxTokensField: undefined,
  style: "openai",
  usage: true,
} as const;
/** A token counter: tokenizes only. */
const counting = { ...plain, usage: false } as const;

export const ENDPOINTS: readonly Endpoint[] = [
  endpoint({
    path: "/v1/chat/completions",
    schema: ChatRequestSchema,
    idPrefix: "chatcmpl-",
    rewritesId: true,
    maxTokensField: "max_tokens",
    style: "openai",
    usage: true,
  }),
  endpoint({
    path: "/v1/completions",
    schema: CompletionRequestSchema,
    idPrefix: "cmpl-",
    rewritesId: true,
    maxTokensField: "max_tokens",
    style: "openai",
    usage: true,
  }),
  endpoint({
    path: "/v1/responses",
    schema: ResponsesRequestSchema,
    // OpenAI's `resp_` and 32 characters: the same length as the engine's, rewritten in place.
    idPrefix: "resp_",
    rewritesId: true,
    maxTokensField: "max_output_tokens",
    style: "responses",
    usage: true,
  }),
  endpoint({
    path: "/v1/responses/input_tokens",
    schema: ResponsesInputTokensRequestSchema,
    idPrefix: "tok-",
    ...counting,
  }),
  endpoint({
    path: "/v1/messages",
    schema: MessagesRequestSchema,
    idPrefix: "msg_",
    rewritesId: true,
    // Required by the schema (as by Anthropic): never filled in.
    maxTokensField: undefined,
    style: "anthropic",
    usage: true,
  }),
  endpoint({
    path: "/v1/messages/count_tokens",
    schema: CountTokensRequestSchema,
    idPrefix: "tok-",
    ...counting,
  }),
  endpoint({ path: "/v1/embeddings", schema: EmbeddingRequestSchema, idPrefix: "emb-", ...plain }),
  ...INSTANCE_KIND_TABLE.rerank.paths.map((path) =>
    endpoint({ path, schema: RerankRequestSchema, idPrefix: "rr-", ...plain }),
  ),
];

/** Whether an instance is of the kind an endpoint needs. */
export const servesKind = (i: ReadyInstance, kind: InstanceKind) => kindOf(i.instance) === kind;

/** A model served, but not by instances of the kind this endpoint needs: what to place instead. */
export function wrongKind(
  model: string,
  endpoint: Endpoint,
  has: readonly InstanceKind[],
): ServiceError {
  const { kind } = endpoint;
  return new ServiceError(
    "invalid_request",
    `${endpoint.path} needs ${/^[aeiou]/.test(kind) ? "an" : "a"} ${kind} instance of ${model}; its ready instances are ${[...new Set(has)].join(", ")}: place one with "kind": "${kind}" (ic place ${model} --kind ${kind})`,
    { details: { model, kind, has: [...new Set(has)] } },
  );
}

/**
 * Bounds of one request: the config's `chat` section, whole (its keys and defaults are in
 * `ChatSchema`, packages/config): `default_max_tokens`, the connect, idle and total timeouts,
 * `migrate_streams` (a header overrides it) and `prefix_routing` (prefix-key.ts, balancing.ts).
 */
export type ChatLimits = z.output<typeof ChatSchema>;

/** The section's defaults, from the schema. */
export const DEFAULT_CHAT_LIMITS: ChatLimits = ChatSchema.parse({});

export interface ChatOptions {
  readonly cluster: ClusterView;
  readonly log: Logger;
  /** The config's `chat` section; a key left out takes its default. */
  readonly chat?: Partial<ChatLimits> | undefined;
  /**
   * Called once per request as it arrives; the observer it returns (if any) sees the request's
   * events in order (tracing and metrics subscribe here). Returning undefined costs nothing.
   */
  readonly observe?: (r: ChatRequestSeen & { commandId: CommandId }) => ChatObserver | undefined;
  /** Extra headers for an instance's engine: its API key (only gateways may talk to engines). */
  readonly engineHeaders?: (instanceId: string) => Record<string, string>;
  /** This gateway's requests in flight (shared with the node's heartbeat and GET /state). */
  readonly load?: RequestLoad;
  /** Each stream migration's outcome and duration (metrics subscribe here). */
  readonly onMigration?: (m: MigrationReport) => void;
  /** The cluster's resumable streams (streams/directory.ts); absent: this gateway's own only. */
  readonly streams?: StreamDirectory;
  /** The prompt-cache map (the gateway's metrics read it); absent: one of its own. */
  readonly promptCache?: PromptCacheMap;
  /** How nodes are asked to save and restore slots (chat.kv_move); absent: caches never move. */
  readonly kvMove?: KvMovePort;
  /** The cache moves' counts (the gateway's metrics read it); absent: one of its own. */
  readonly kvStats?: KvMoveStats;
}

/** Wall-clock ms with sub-ms precision (Chrome traces want microseconds). */
export const preciseNow = (): number => performance.timeOrigin + performance.now();

/** What every step of a request shares: the options, this gateway's load, the task reports, the bounds. */
export interface ChatContext {
  readonly o: ChatOptions;
  readonly load: RequestLoad;
  readonly reports: TaskReports;
  readonly limits: ChatLimits;
  readonly streams: StreamDirectory;
  /** LoadModel commands this gateway has on their way, per model and kind (chat/on-demand.ts). */
  readonly loads: Map<string, Promise<unknown>>;
  /** What each instance's prompt cache holds, as this gateway learned it (prefix_routing `cache`). */
  readonly cache: PromptCacheMap;
  /** Each engine's slot count, asked of it once: the map's floor (engine-slots.ts). */
  readonly slots: EngineSlots;
  /** The streams that move with their cache when their node drains (chat/handover.ts). */
  readonly handovers: HandoverWatch;
  readonly kv: KvMoveStats;
}

export const TIMINGS = Buffer.from('"timings"');
export const DATA = Buffer.from("data: ");

/** A usage object in any of the APIs' words: OpenAI's, or the Responses and Anthropic ones. */
export interface AnyUsage {
  prompt_tokens?: number;
  completion_tokens?: number;
  input_tokens?: number;
  output_tokens?: number;
  /** Anthropic's: prompt tokens read from the cache, not counted in its input_tokens. */
  cache_read_input_tokens?: number;
}

/** A usage in OpenAI's words (undefined stays undefined). */
export function openAiUsage(
  u: AnyUsage | undefined,
): { prompt_tokens?: number; completion_tokens?: number } | undefined {
  if (!u) return undefined;
  const prompt =
    u.prompt_tokens ??
    (u.input_tokens === undefined ? undefined : u.input_tokens + (u.cache_read_input_tokens ?? 0));
  const completion = u.completion_tokens ?? u.output_tokens;
  return {
    ...(prompt === undefined ? {} : { prompt_tokens: prompt }),
    ...(completion === undefined ? {} : { completion_tokens: completion }),
  };
}

/** Prompt plus completion tokens of a request, from the engine's usage (else its timings). */
export function tokensUsed(
  usage: { prompt_tokens?: number; completion_tokens?: number } | undefined,
  timings: EngineTimings | undefined,
): number | undefined {
  if (usage?.prompt_tokens !== undefined || usage?.completion_tokens !== undefined)
    return (usage.prompt_tokens ?? 0) + (usage.completion_tokens ?? 0);
  if (!timings) return undefined;
  return (timings.cache_n ?? 0) + (timings.prompt_n ?? 0) + (timings.predicted_n ?? 0);
}

/**
 * The timings and usage of the last event in `buf` that has them (llama-server's final chunk; the
 * Responses API's `response.completed`, whose usage is inside its response).
 */
export function engineReport(buf: Buffer): Extract<ChatEvent, { type: "engine" }> | undefined {
  const at = buf.lastIndexOf(TIMINGS);
  if (at < 0) return undefined;
  const json = dataAround(buf, at) as
    { timings?: EngineTimings; usage?: AnyUsage; response?: { usage?: AnyUsage } } | undefined;
  if (!json?.timings) return undefined;
  const usage = openAiUsage(json.usage ?? json.response?.usage);
  return { type: "engine", at: preciseNow(), timings: json.timings, usage };
}

/** The JSON of the `data:` line around byte `at` of `buf`; undefined when it does not parse. */
function dataAround(buf: Buffer, at: number): unknown {
  const start = buf.lastIndexOf(DATA, at);
  const end = buf.indexOf("\n", at);
  try {
    return JSON.parse(buf.subarray(start + 6, end < 0 ? buf.length : end).toString());
  } catch {
    return undefined;
  }
}

const MESSAGE_START = Buffer.from('"type":"message_start"');
const MESSAGE_DELTA = Buffer.from('"type":"message_delta"');

/**
 * An Anthropic stream's usage: its input in `message_start` (in the first events relayed), its
 * output in the last `message_delta`. The engine sends no timings there.
 */
export function anthropicReport(
  first: Buffer | undefined,
  last: readonly (Buffer | undefined)[],
): Extract<ChatEvent, { type: "engine" }> | undefined {
  const start = first ? first.indexOf(MESSAGE_START) : -1;
  const opened =
    start >= 0
      ? (dataAround(first!, start) as { message?: { usage?: AnyUsage } } | undefined)
      : undefined;
  let output: number | undefined;
  for (const buf of last) {
    const at = buf ? buf.lastIndexOf(MESSAGE_DELTA) : -1;
    if (at < 0) continue;
    output = (dataAround(buf!, at) as { usage?: AnyUsage } | undefined)?.usage?.output_tokens;
    break;
  }
  const input = opened?.message?.usage;
  if (!input && output === undefined) return undefined;
  const usage = openAiUsage({ ...input, output_tokens: output ?? 0 });
  return { type: "engine", at: preciseNow(), timings: {}, usage };
}

export const LONE_SURROGATE =
  /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
export const MEDIA_PARTS = new Set(["image_url", "input_image", "image", "input_audio", "audio"]);

/**
 * The request's content problems llama-server would answer with a 500: a string that is not valid
 * Unicode (a lone surrogate), and image or audio parts for a model without a projector. The walk is
 * iterative (the body's depth is already bounded by the parse edge).
 */
export function contentProblem(
  body: InferenceRequest,
  model: ModelRecord | undefined,
): string | null {
  const stack: unknown[] = [body];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === "string") {
      if (LONE_SURROGATE.test(v))
        return "a string holds a lone UTF-16 surrogate (not valid Unicode)";
    } else if (Array.isArray(v)) {
      for (const x of v) stack.push(x);
    } else if (typeof v === "object" && v !== null) {
      for (const [k, x] of Object.entries(v)) stack.push(k, x);
    }
  }
  if (model?.mmproj) return null;
  // Chat's and Anthropic's messages, and the Responses API's input items, hold content parts.
  const turns = [body.messages, body.input].flatMap((x) => (Array.isArray(x) ? x : []));
  for (const m of turns) {
    const content = (m as { content?: unknown } | null)?.content;
    if (!Array.isArray(content)) continue;
    const media = (content as { type?: unknown }[]).find(
      (p) => typeof p?.type === "string" && MEDIA_PARTS.has(p.type),
    );
    if (media)
      return `${body.model} has no vision/audio projector: '${String(media.type)}' content is not supported`;
  }
  return null;
}

/** What every try of one request shares. */
/** One HTTP call on an inference endpoint: its exchange, its command id and its observer. */
export interface ChatCall {
  readonly c: Context;
  readonly commandId: CommandId;
  /** The observer of the request's phases, when tracing or metrics asked for one. */
  readonly obs: ChatObserver | undefined;
}

/** A request through its steps: the call, its body and what every try of it shares. */
export interface RequestContext extends ChatCall {
  readonly body: InferenceRequest;
  /** The endpoint it came in on (the engine's path is the same). */
  readonly endpoint: Endpoint;
  /** The token, when it has limits: its task is admitted by the master before the engine sees it. */
  readonly limited: ApiToken | undefined;
  /** Whether the tokens a request used are reported (the token has tokens_per_minute). */
  readonly countTokens: boolean;
  /** The end of the request's total bound (chat.total_timeout_ms from its arrival). */
  readonly deadline: number;
  /** A chat stream that opted in to migration (chat.migrate_streams or `x-ic-migrate: 1`). */
  readonly migrate: boolean;
  /**
   * A migrating stream's sampling seed (chat.kv_move): it names the engine slot that served the
   * stream, whose KV cache then moves with it (chat/handover.ts). Absent: the cache stays.
   */
  readonly kvSeed: number | undefined;
  /** The instances tried so far (a retry or a migration goes to another). */
  readonly tried: Set<string>;
  /** What the engine's prompt cache could share with this conversation's other requests. */
  readonly prefixKey: string | undefined;
  /** The prompt's block hashes, when routing on the prompt caches (prefix_routing `cache`). */
  readonly prompt: PromptBlocks | undefined;
  /** What the prompt-cache map expected on the instance tried last: the answer settles it. */
  prediction?: Prediction | undefined;
  /** The name of the token it came with (null: anonymous): a resumed stream must come with it too. */
  readonly token: string | null;
  /**
   * A stream's conversation (docs/api.md, "Resumable streams"): its id (the client's
   * `X-Conversation-Id`, else one made here) and whether the client chose it. Absent: not a
   * stream. While `resumable`, the engine keeps the stream under the command id, past a lost
   * connection; a continuation on another instance (migration) is not resumable.
   */
  readonly conversation: { readonly id: string; readonly clientSupplied: boolean } | undefined;
  resumable: boolean;
  clientGone: boolean;
  /**
   * A stream whose 200 went out while its model loaded on demand (chat/on-demand.ts): the answer is
   * written to it, and an error ends it with one error event.
   */
  early?: Sink;
}
