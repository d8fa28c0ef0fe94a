// The publisher's one error class and its HTTP mapping onto the spec's `{ "error": string }` envelope.
// Codes form a closed union; the switch below is exhaustive so a new code cannot go unmapped.
import type { Context } from "hono";
import type { Logger } from "@ic/log";

export const PUBLISHER_ERROR_CODES = [
  "bad_request",
  "forbidden",
  "not_found",
  "conflict",
  "busy",
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
    options: { cause?: unknown; extra?: Record<string, string> } = {},
  ) {
    super(message, { cause: options.cause });
    this.name = "PublisherError";
    this.retryable = code === "busy";
    this.extra = options.extra ?? {};
  }
}

export function statusFor(code: PublisherErrorCode): 400 | 403 | 404 | 409 | 429 | 500 {
  switch (code) {
    case "bad_request":
      return 400;
    case "forbidden":
      return 403;
    case "not_found":
      return 404;
    case "conflict":
      return 409;
    case "busy":
      return 429;
    case "catalog_unavailable":
    case "internal":
      return 500;
  }
}

export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
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
