// Maps what llama-server answers on failure onto the closed error model: the client's mistakes
// become 400 invalid_request (not retryable), the engine's own failures a retryable upstream error.
// llama-server reports many request-parsing failures as 500 (its exception wrapper), so the message
// decides; the patterns below are the request-side failures of its chat parser and JSON reader.
import { ServiceError } from "@ic/protocol";

/** llama-server's error object: `{ code, message, type, ...extra }` (inside `{ "error": ... }`). */
export interface EngineError {
  readonly code?: number;
  readonly message: string;
  readonly type?: string;
  readonly extra: Record<string, unknown>;
}

/**
 * Messages of exceptions llama-server throws while reading the request (before any inference);
 * they reach the client as 500 `server_error` although the request was at fault.
 */
const CLIENT_CAUSED = [
  /^\[json\.exception\./, // malformed JSON, lone surrogates, wrong JSON types
  /^Failed to parse /, // tools, tool_choice, messages, response_format
  /\binput is not supported\b/, // image or audio parts for a text-only model
  /^Expected '/, // "Expected 'tools' to be an array"
  /^Unsupported /,
  /^Invalid /,
  /^Missing /,
  /\bmust be\b/,
  /\bnot supported\b/,
  /^Cannot /,
  /^Only one /,
];

/** Reads `{ "error": { ... } }` or `{ "error": "..." }` from an engine body; undefined if neither. */
export function parseEngineError(text: string): EngineError | undefined {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof json !== "object" || json === null || !("error" in json)) return undefined;
  const e = (json as { error: unknown }).error;
  if (typeof e === "string") return { message: e, extra: {} };
  if (typeof e !== "object" || e === null) return undefined;
  const { code, message, type, ...extra } = e as Record<string, unknown>;
  return {
    ...(typeof code === "number" ? { code } : {}),
    message: typeof message === "string" ? message : JSON.stringify(e).slice(0, 500),
    ...(typeof type === "string" ? { type } : {}),
    extra,
  };
}

export function isClientCaused(status: number, e: EngineError | undefined): boolean {
  if (status === 400 || status === 413 || status === 422 || status === 501) return true;
  if (status === 500 && e) return CLIENT_CAUSED.some((re) => re.test(e.message));
  return false;
}

/**
 * The typed error for an engine failure answered with `status` (an HTTP status, or the `code` of an
 * error event inside a stream). 401/403/404 from the engine are our own misconfiguration, not the
 * client's: they stay upstream failures.
 */
export function engineFailure(status: number, bodyText: string, model: string): ServiceError {
  const e = parseEngineError(bodyText);
  const message = e?.message ?? bodyText.slice(0, 500);
  const details: Record<string, unknown> = { engine_status: status };
  if (e?.type) details.engine_type = e.type;
  for (const [k, v] of Object.entries(e?.extra ?? {})) details[k] = v;
  if (isClientCaused(status, e)) {
    return new ServiceError("invalid_request", `the engine refused the request: ${message}`, {
      details,
    });
  }
  return new ServiceError(
    "upstream_failed",
    `the engine for ${model} failed (${status}): ${message}`,
    { details },
  );
}
