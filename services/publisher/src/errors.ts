// The publisher's one error class and its HTTP mapping onto the spec's `{ "error": string }` envelope.
// Codes form a closed union; the switch below is exhaustive so a new code cannot go unmapped.
import type { Context } from "hono";
import type { Logger } from "@ic/log";

export const PUBLISHER_ERROR_CODES = [
  "bad_request",
  "forbidden",
  "not_found",
  "conflict",
  "too_large",
  "busy",
  "hub_failed",
  "catalog_unavailable",
  "internal",
] as const;
export type PublisherErrorCode = (typeof PUBLISHER_ERROR_CODES)[number];

export class PublisherError extends Error {
  readonly retryable: boolean;
  /** Extra top-level fields of the error body, e.g. `source_model` on a catalog miss. */
  readonly extra: Readonly<Record<string, string>>;

  constructor(
    readonly code: PublisherErrorCode,
    message: string,
    options: { cause?: unknown; extra?: Record<string, string>; retryable?: boolean } = {},
  ) {
    super(message, { cause: options.cause });
    this.name = "PublisherError";
    this.retryable = options.retryable ?? code === "busy";
    this.extra = options.extra ?? {};
  }
}

export function statusFor(code: PublisherErrorCode): 400 | 403 | 404 | 409 | 413 | 429 | 500 {
  switch (code) {
    case "bad_request":
      return 400;
    case "forbidden":
      return 403;
    case "not_found":
      return 404;
    case "conflict":
      return 409;
    case "too_large":
      return 413;
    case "busy":
      return 429;
    case "hub_failed":
    case "catalog_unavailable":
    case "internal":
      return 500;
  }
}

export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

/** `err` with a note appended to its message, code and cause kept. */
export function withNote(err: unknown, note: string): Error {
  if (err instanceof PublisherError)
    return new PublisherError(err.code, `${err.message}; ${note}`, {
      cause: err.cause,
      extra: { ...err.extra },
      retryable: err.retryable,
    });
  return new Error(`${errorMessage(err)}; ${note}`, { cause: err });
}

/** Single-line text with every occurrence of the secret replaced; safe for logs, bodies and streams. */
export function redact(text: string, secret: string | undefined): string {
  let out = text.replace(/[\r\n]+/g, " ");
  if (secret && secret.length >= 4) out = out.split(secret).join("[redacted]");
  return out;
}

/** The one place error responses are produced. */
export function toErrorResponse(
  c: Context,
  err: unknown,
  log: Logger,
  secret: string | undefined,
): Response {
  if (err instanceof PublisherError) {
    const status = statusFor(err.code);
    if (status === 500)
      log.error({ code: err.code, err: redact(errorMessage(err), secret) }, "request failed");
    return c.json({ error: redact(err.message, secret), ...err.extra }, status);
  }
  const message = redact(errorMessage(err), secret);
  log.error({ err: message }, "unhandled error");
  return c.json({ error: message || "internal error" }, 500);
}

/**
 * The envelope as raw HTTP/1.1 bytes, for the few answers node's HTTP layer gives before a request
 * reaches the app (malformed request line or headers, oversized headers, unsupported Expect).
 */
export function rawErrorResponse(status: 400 | 408 | 417 | 431, message: string): string {
  const reason = {
    400: "Bad Request",
    408: "Request Timeout",
    417: "Expectation Failed",
    431: "Request Header Fields Too Large",
  }[status];
  const body = JSON.stringify({ error: message });
  return [
    `HTTP/1.1 ${status} ${reason}`,
    "Content-Type: application/json",
    `Content-Length: ${Buffer.byteLength(body)}`,
    "Cache-Control: no-store",
    "Connection: close",
    "",
    body,
  ].join("\r\n");
}
