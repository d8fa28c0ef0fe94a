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
  /** Detection gave nothing a catalog entry can be built from (no resolvable base model). */
  "not_registrable",
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
    case "not_registrable":
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

/**
 * The one scrub of the configured hub token: every occurrence of it replaced, as typed and as it
 * appears inside JSON strings and URLs. The response edge (every JSON body, the error envelope
 * included), the logger (every line) and the job stream all use it.
 */
export function scrubSecret(text: string, secret: string | undefined): string {
  if (!secret || secret.length < 4) return text;
  let out = text;
  for (const form of new Set([
    secret,
    JSON.stringify(secret).slice(1, -1),
    encodeURIComponent(secret),
  ]))
    out = out.split(form).join("[redacted]");
  return out;
}

/** Single-line text with the secret scrubbed; safe for logs, bodies and job streams. */
export function redact(text: string, secret: string | undefined): string {
  return scrubSecret(text.replace(/[\r\n]+/g, " "), secret);
}

/** The one place error responses are produced (the response edge scrubs the hub token). */
export function toErrorResponse(c: Context, err: unknown, log: Logger): Response {
  if (err instanceof PublisherError) {
    const status = statusFor(err.code);
    if (status === 500) log.error({ code: err.code, err: errorMessage(err) }, "request failed");
    return c.json({ error: err.message, ...err.extra }, status);
  }
  const message = errorMessage(err).replace(/[\r\n]+/g, " ");
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
