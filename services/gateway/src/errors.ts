// The one place HTTP errors are produced: ServiceError -> status + envelope, validation -> invalid_request.
import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import type { z } from "zod";
import { errorBody, httpStatusFor, ServiceError } from "@ic/protocol";
import type { Logger } from "@ic/log";
import { readBody } from "./node-http.ts";

export function validationError(error: z.ZodError, what: string): ServiceError {
  const issues = error.issues
    .slice(0, 10)
    .map((i) => ({ path: i.path.join("."), message: i.message }));
  const first = issues[0];
  const msg = first ? `${what}: ${first.path || "(body)"}: ${first.message}` : `${what} is invalid`;
  return new ServiceError("invalid_request", msg, { details: { issues } });
}

/** Parses a JSON body with a schema at the edge; malformed JSON and schema violations are 400s. */
export async function parseJson<S extends z.ZodType>(
  c: Context,
  schema: S,
  what = "request body",
): Promise<z.output<S>> {
  const bytes = await readBody(c);
  let raw: unknown;
  try {
    raw = JSON.parse(bytes.toString("utf8"));
  } catch {
    throw new ServiceError("invalid_request", `${what} must be valid JSON`);
  }
  const r = schema.safeParse(raw);
  if (!r.success) throw validationError(r.error, what);
  return r.data;
}

export function toResponse(c: Context, err: unknown, log: Logger): Response {
  if (err instanceof ServiceError) {
    const headers: Record<string, string> =
      err.retryAfterS !== undefined ? { "retry-after": String(Math.ceil(err.retryAfterS)) } : {};
    return c.json(errorBody(err), httpStatusFor(err.code), headers);
  }
  if (err instanceof HTTPException) {
    const code = err.status === 404 ? "not_found" : "invalid_request";
    return c.json(errorBody(new ServiceError(code, err.message)), httpStatusFor(code));
  }
  log.error({ err }, "unhandled error");
  return c.json(errorBody(new ServiceError("internal", "internal error")), 500);
}
