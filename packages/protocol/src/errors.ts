// The closed set of error codes, the one error class services throw, and their HTTP mapping.
// The control API envelope is OpenAI-shaped so chat clients and operators read the same body.
import { z } from "zod";

export const ERROR_CODES = [
  "invalid_request",
  "unauthorized",
  "forbidden",
  "unsupported_media_type",
  "not_found",
  "model_not_found",
  "model_not_ready",
  "insufficient_memory",
  "no_cycle",
  "all_excluded",
  "tensor_unsupported",
  /** The placement needs a node whose engine is unusable or whose nodeHealth has an error. */
  "node_unhealthy",
  "info_pending",
  "session_changed",
  "no_master",
  /** A change to the operator's intent found no quorum of the intent store (a partition's minority side). */
  "no_quorum",
  "instance_lost",
  "task_failed",
  "upstream_failed",
  /** The engine did not connect, send the next chunk, or finish within the gateway's bounds. */
  "upstream_timeout",
  "download_failed",
  /** A token's limit (requests or tokens per minute, concurrent requests) is reached: 429. */
  "rate_limited",
  "conflict",
  "unavailable",
  "internal",
] as const;
export type ErrorCode = (typeof ERROR_CODES)[number];

/** The codes a placement refuses with (@ic/placement; the cluster check adds node_unhealthy). */
export const PLACEMENT_REFUSAL_CODES = [
  "insufficient_memory",
  "no_cycle",
  "all_excluded",
  "tensor_unsupported",
  "info_pending",
  "invalid_request",
] as const satisfies readonly ErrorCode[];
export type PlacementRefusalCode = (typeof PLACEMENT_REFUSAL_CODES)[number];

export const RETRYABLE: Readonly<Record<ErrorCode, boolean>> = {
  invalid_request: false,
  unauthorized: false,
  forbidden: false,
  unsupported_media_type: false,
  not_found: false,
  model_not_found: false,
  model_not_ready: true,
  insufficient_memory: false,
  no_cycle: false,
  all_excluded: false,
  tensor_unsupported: false,
  node_unhealthy: false,
  info_pending: true,
  session_changed: true,
  no_master: true,
  no_quorum: true,
  instance_lost: true,
  task_failed: true,
  upstream_failed: true,
  upstream_timeout: true,
  download_failed: true,
  rate_limited: true,
  conflict: false,
  unavailable: true,
  internal: false,
};

export class ServiceError extends Error {
  readonly retryable: boolean;
  constructor(
    readonly code: ErrorCode,
    message: string,
    options: {
      cause?: unknown;
      details?: Record<string, unknown>;
      retryable?: boolean;
      /** Seconds a client should wait before retrying (HTTP `Retry-After`). */
      retryAfterS?: number;
    } = {},
  ) {
    super(message, { cause: options.cause });
    this.name = "ServiceError";
    this.retryable = options.retryable ?? RETRYABLE[code];
    this.details = options.details;
    this.retryAfterS = options.retryAfterS;
  }
  readonly details: Record<string, unknown> | undefined;
  readonly retryAfterS: number | undefined;
}

export function httpStatusFor(
  code: ErrorCode,
): 400 | 401 | 403 | 404 | 409 | 415 | 429 | 500 | 502 | 503 | 504 {
  switch (code) {
    case "unauthorized":
      return 401;
    case "forbidden":
      return 403;
    case "unsupported_media_type":
      return 415;
    case "invalid_request":
    case "insufficient_memory":
    case "no_cycle":
    case "all_excluded":
    case "tensor_unsupported":
    case "node_unhealthy":
      return 400;
    case "not_found":
    case "model_not_found":
    case "model_not_ready":
      return 404;
    case "conflict":
      return 409;
    case "rate_limited":
      return 429;
    case "task_failed":
    case "instance_lost":
    case "internal":
      return 500;
    case "upstream_failed":
      return 502;
    case "upstream_timeout":
      return 504;
    case "info_pending":
    case "session_changed":
    case "no_master":
    case "no_quorum":
    case "download_failed":
    case "unavailable":
      return 503;
  }
}

/** OpenAI's error `type` for each code, so OpenAI clients classify errors sensibly. */
export function errorTypeFor(code: ErrorCode): string {
  const status = httpStatusFor(code);
  if (status === 400 || status === 409 || status === 415) return "invalid_request_error";
  if (status === 401) return "authentication_error";
  if (status === 403) return "permission_error";
  if (status === 404) return "not_found_error";
  if (status === 429) return "rate_limit_error";
  return "server_error";
}

export const ErrorBodySchema = z.object({
  error: z.object({
    code: z.enum(ERROR_CODES),
    message: z.string(),
    type: z.string(),
    retryable: z.boolean(),
    param: z.string().nullable().optional(),
    details: z.record(z.string(), z.unknown()).optional(),
  }),
});
export type ErrorBody = z.infer<typeof ErrorBodySchema>;

export function errorBody(err: ServiceError): ErrorBody {
  return {
    error: {
      code: err.code,
      message: err.message,
      type: errorTypeFor(err.code),
      retryable: err.retryable,
      param: null,
      ...(err.details ? { details: err.details } : {}),
    },
  };
}

/**
 * Anthropic's error envelope (`{"type":"error","error":{"type","message"}}`), which Anthropic's
 * clients parse on /v1/messages: the same error, its type in Anthropic's words, the closed code and
 * the rest of ours beside them.
 */
export const AnthropicErrorBodySchema = z.object({
  type: z.literal("error"),
  error: z.object({
    type: z.string(),
    message: z.string(),
    code: z.enum(ERROR_CODES),
    retryable: z.boolean(),
    details: z.record(z.string(), z.unknown()).optional(),
  }),
});
export type AnthropicErrorBody = z.infer<typeof AnthropicErrorBodySchema>;

/** Anthropic's error type for each HTTP status (their docs, "Errors"). */
function anthropicTypeFor(status: number): string {
  if (status === 400 || status === 409 || status === 415) return "invalid_request_error";
  if (status === 401) return "authentication_error";
  if (status === 403) return "permission_error";
  if (status === 404) return "not_found_error";
  if (status === 429) return "rate_limit_error";
  if (status === 503) return "overloaded_error";
  return "api_error";
}

export function anthropicErrorBody(err: ServiceError): AnthropicErrorBody {
  return {
    type: "error",
    error: {
      type: anthropicTypeFor(httpStatusFor(err.code)),
      message: err.message,
      code: err.code,
      retryable: err.retryable,
      ...(err.details ? { details: err.details } : {}),
    },
  };
}

/** The API family whose error envelope a path's clients parse: Anthropic's under /v1/messages. */
export function errorFamilyOf(path: string): "openai" | "anthropic" {
  return path === "/v1/messages" || path.startsWith("/v1/messages/") ? "anthropic" : "openai";
}

/** The error's body in the envelope of the family `path` belongs to. */
export function errorBodyFor(path: string, err: ServiceError): ErrorBody | AnthropicErrorBody {
  return errorFamilyOf(path) === "anthropic" ? anthropicErrorBody(err) : errorBody(err);
}

/** Wire form of an error inside bus replies. */
export const WireErrorSchema = z.object({
  code: z.enum(ERROR_CODES),
  message: z.string(),
  details: z.record(z.string(), z.unknown()).optional(),
  /** Seconds a client should wait before retrying (becomes HTTP `Retry-After`). */
  retry_after_s: z.number().nonnegative().optional(),
});
export type WireError = z.infer<typeof WireErrorSchema>;

export function toWireError(e: unknown): WireError {
  if (e instanceof ServiceError) {
    return {
      code: e.code,
      message: e.message,
      ...(e.details ? { details: e.details } : {}),
      ...(e.retryAfterS !== undefined ? { retry_after_s: e.retryAfterS } : {}),
    };
  }
  return { code: "internal", message: e instanceof Error ? e.message : String(e) };
}

export function fromWireError(w: WireError): ServiceError {
  return new ServiceError(w.code, w.message, {
    ...(w.details ? { details: w.details } : {}),
    ...(w.retry_after_s !== undefined ? { retryAfterS: w.retry_after_s } : {}),
  });
}
