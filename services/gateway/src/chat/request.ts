// A chat request's vocabulary and its first step, validate: the endpoints and their body schemas,
// the request's bounds (the config's chat section), what every try of a request shares, and the
// content checks llama-server would otherwise answer with a 500.
import type { z } from "zod";
import {
  ChatRequestSchema,
  CompletionRequestSchema,
  EmbeddingRequestSchema,
  ServiceError,
} from "@ic/protocol";
import type { ChatEvent, ChatObserver, CommandId, EngineTimings, ModelRecord } from "@ic/protocol";
import type { Logger } from "@ic/log";
import { ChatSchema } from "@ic/config";
import type { ClusterView } from "@ic/protocol";
import type { RequestLoad } from "../request-load.ts";
import type { ReadyInstance } from "../readiness.ts";
import type { TaskReports } from "../task-reports.ts";
import type { ApiToken } from "@ic/http";
import type { MigrationReport } from "../migration.ts";

export type ChatRequest = z.output<typeof ChatRequestSchema>;
/** What the chat and the text completion endpoints share: the fields the gateway reads. */
export type InferenceRequest = {
  model: string;
  stream?: boolean | undefined;
  max_tokens?: number | undefined;
  max_completion_tokens?: number | undefined;
} & Record<string, unknown>;

/** One OpenAI inference endpoint: how its body is checked and where it goes on the engine. */
export interface Endpoint {
  readonly path: "/v1/chat/completions" | "/v1/completions" | "/v1/embeddings";
  readonly schema: z.ZodType<InferenceRequest>;
  /** The command id's prefix (OpenAI's: `chatcmpl-`, `cmpl-`; `emb-` for the trace only). */
  readonly idPrefix: string;
  /** Served by embedding instances (placed with `embeddings: true`), not by generating ones. */
  readonly embeddings: boolean;
}

export const ENDPOINTS: readonly Endpoint[] = [
  {
    path: "/v1/chat/completions",
    schema: ChatRequestSchema,
    idPrefix: "chatcmpl-",
    embeddings: false,
  },
  {
    path: "/v1/completions",
    schema: CompletionRequestSchema,
    idPrefix: "cmpl-",
    embeddings: false,
  },
  {
    path: "/v1/embeddings",
    schema: EmbeddingRequestSchema,
    idPrefix: "emb-",
    embeddings: true,
  },
];

/** Whether an instance is of the kind an endpoint needs (embedding instances serve embeddings only). */
export const servesKind = (i: ReadyInstance, embeddings: boolean) =>
  (i.instance.embeddings === true) === embeddings;

/** A model served, but not by instances of the kind this endpoint needs. */
export function wrongKind(model: string, endpoint: Endpoint): ServiceError {
  return new ServiceError(
    "invalid_request",
    endpoint.embeddings
      ? `${model} has no instance placed for embeddings: place one with "embeddings": true (ic place ${model} --embeddings)`
      : `${model} is placed for embeddings only (its instances run with --embeddings): use /v1/embeddings, or place an instance without "embeddings"`,
    { details: { model, embeddings: endpoint.embeddings } },
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
  readonly observe?: (r: { commandId: CommandId; receivedAt: number }) => ChatObserver | undefined;
  /** Extra headers for an instance's engine: its API key (only gateways may talk to engines). */
  readonly engineHeaders?: (instanceId: string) => Record<string, string>;
  /** This gateway's requests in flight (shared with the node's heartbeat and GET /state). */
  readonly load?: RequestLoad;
  /** Each stream migration's outcome and duration (metrics subscribe here). */
  readonly onMigration?: (m: MigrationReport) => void;
}

/** Wall-clock ms with sub-ms precision (Chrome traces want microseconds). */
export const preciseNow = (): number => performance.timeOrigin + performance.now();

/** What every step of a request shares: the options, this gateway's load, the task reports, the bounds. */
export interface ChatContext {
  readonly o: ChatOptions;
  readonly load: RequestLoad;
  readonly reports: TaskReports;
  readonly limits: ChatLimits;
}

export const TIMINGS = Buffer.from('"timings"');
export const DATA = Buffer.from("data: ");

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

/** The timings and usage of the last event in `buf` that has them (llama-server's final chunk). */
export function engineReport(buf: Buffer): Extract<ChatEvent, { type: "engine" }> | undefined {
  const at = buf.lastIndexOf(TIMINGS);
  if (at < 0) return undefined;
  const start = buf.lastIndexOf(DATA, at);
  const end = buf.indexOf("\n", at);
  try {
    const json = JSON.parse(buf.subarray(start + 6, end < 0 ? buf.length : end).toString()) as {
      timings?: EngineTimings;
      usage?: { prompt_tokens?: number; completion_tokens?: number };
    };
    if (!json.timings) return undefined;
    return { type: "engine", at: preciseNow(), timings: json.timings, usage: json.usage };
  } catch {
    return undefined;
  }
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
  const messages = (body as Partial<ChatRequest>).messages;
  if (!model?.mmproj && messages) {
    for (const m of messages) {
      if (!Array.isArray(m.content)) continue;
      const media = m.content.find((p) => MEDIA_PARTS.has(p.type));
      if (media)
        return `${body.model} has no vision/audio projector: '${media.type}' content is not supported`;
    }
  }
  return null;
}

/** What every try of one request shares. */
export interface RequestContext {
  readonly body: InferenceRequest;
  /** The engine's endpoint for it (the same path as the request's). */
  readonly path: Endpoint["path"];
  /** An embeddings request: only embedding instances serve it, and its answer keeps no id. */
  readonly embeddings: boolean;
  /** The token, when it has limits: its task is admitted by the master before the engine sees it. */
  readonly limited: ApiToken | undefined;
  /** Whether the tokens a request used are reported (the token has tokens_per_minute). */
  readonly countTokens: boolean;
  /** The end of the request's total bound (chat.total_timeout_ms from its arrival). */
  readonly deadline: number;
  /** A chat stream that opted in to migration (chat.migrate_streams or `x-ic-migrate: 1`). */
  readonly migrate: boolean;
  /** The instances tried so far (a retry or a migration goes to another). */
  readonly tried: Set<string>;
  /** What the engine's prompt cache could share with this conversation's other requests. */
  readonly prefixKey: string | undefined;
  clientGone: boolean;
}
