// The one place HTTP errors are produced: ServiceError -> status + envelope, validation -> invalid_request.
import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import type { z } from "zod";
import { errorBodyFor, httpStatusFor, ServiceError } from "@ic/protocol";
import type { Logger } from "@ic/log";
import { readBody } from "./node-http.ts";

/** "an array", "a string": the validator's type names as a person says them. */
const TYPE_WORDS: Record<string, string> = {
  array: "an array",
  string: "a string",
  number: "a number",
  int: "an integer",
  boolean: "true or false",
  object: "an object",
  null: "null",
  undefined: "nothing",
  nan: "not a number",
};
const typeWords = (t: string) => TYPE_WORDS[t] ?? t;
const UNITS: Record<string, string> = { string: "character", array: "item", set: "item" };

/**
 * One validation issue in words: what the field must be, not the validator's template. A message a
 * schema wrote itself (not one of zod's defaults) is kept as it is.
 */
export function humanIssue(issue: z.core.$ZodIssue): string {
  const m = issue.message;
  switch (issue.code) {
    case "invalid_type": {
      const got = /^Invalid input: expected \w+, received (\w+)$/.exec(m)?.[1];
      if (got === undefined) return m;
      const want = typeWords(issue.expected);
      return got === "undefined"
        ? `is required (${want})`
        : `must be ${want}, not ${typeWords(got)}`;
    }
    case "too_small":
    case "too_big": {
      if (!/^Too (small|big):/.test(m)) return m;
      const small = issue.code === "too_small";
      const bound = small
        ? (issue as z.core.$ZodIssueTooSmall).minimum
        : (issue as z.core.$ZodIssueTooBig).maximum;
      const inclusive = issue.inclusive !== false;
      const unit = UNITS[issue.origin] ?? "";
      const what = small
        ? inclusive
          ? "at least"
          : "more than"
        : inclusive
          ? "at most"
          : "less than";
      return unit
        ? `must have ${what} ${String(bound)} ${unit}${Number(bound) === 1 ? "" : "s"}`
        : `must be ${what} ${String(bound)}`;
    }
    case "invalid_value":
      return m.startsWith("Invalid option") || m.startsWith("Invalid input")
        ? `must be ${issue.values.length === 1 ? JSON.stringify(issue.values[0]) : `one of ${issue.values.map((v) => JSON.stringify(v)).join(", ")}`}`
        : m;
    case "invalid_union": {
      // Each accepted form refused the value for its type alone: name the forms.
      const firsts = issue.errors.map((branch) => branch[0]);
      const types = firsts.map((f) =>
        f?.code === "invalid_type" && f.path.length === 0
          ? /^Invalid input: expected \w+, received (\w+)$/.exec(f.message)
          : null,
      );
      if (firsts.length === 0 || types.some((t) => t === null)) return m;
      const wants = [
        ...new Set(firsts.map((f) => typeWords((f as z.core.$ZodIssueInvalidType).expected))),
      ];
      const got = types[0]![1]!;
      return got === "undefined"
        ? `is required (${wants.join(" or ")})`
        : `must be ${wants.join(" or ")}, not ${typeWords(got)}`;
    }
    case "unrecognized_keys":
      return `has unknown field${issue.keys.length === 1 ? "" : "s"} ${issue.keys.map((k) => `"${k}"`).join(", ")}`;
    case "invalid_format":
      return m.startsWith("Invalid string: must match pattern")
        ? `has the wrong form (${m.slice("Invalid string: ".length)})`
        : m;
    default:
      return m;
  }
}

export function validationError(error: z.ZodError, what: string): ServiceError {
  const issues = error.issues.slice(0, 10).map((i) => {
    const words = humanIssue(i);
    // A phrase ("must be …") follows the field's name; a schema's own message is quoted after a colon.
    return { path: i.path.join("."), message: words, phrase: words !== i.message };
  });
  const first = issues[0];
  const msg = !first
    ? `${what} is invalid`
    : first.path
      ? `${what}: ${first.path}${first.phrase ? " " : ": "}${first.message}`
      : `${what}${first.phrase ? " " : ": "}${first.message}`;
  return new ServiceError("invalid_request", msg, {
    details: { issues: issues.map(({ path, message }) => ({ path, message })) },
  });
}

/**
 * JSON bodies nested deeper than this (objects and arrays alike) are refused at the edge: past it, a
 * pass-through field re-serialized for the engine (JSON.stringify recurses) would overflow the stack.
 */
export const MAX_JSON_DEPTH = 64;

/**
 * Whether a JSON text nests objects and arrays deeper than `limit`, scanning its bytes outside strings
 * (UTF-8 continuation bytes are never ASCII, so a byte scan is exact). For valid JSON this is its depth;
 * for invalid JSON the scan agrees with any parser up to the parser's first syntax error.
 */
export function nestedDeeperThan(bytes: Uint8Array, limit: number): boolean {
  let depth = 0;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i]!;
    if (b === 0x22) {
      i = closingQuote(bytes, i + 1);
      if (i < 0) return false; // an unterminated string: JSON.parse refuses it
    } else if (b === 0x5b || b === 0x7b) {
      if (++depth > limit) return true;
    } else if (b === 0x5d || b === 0x7d) depth--;
  }
  return false;
}

/** Index of the quote that closes a string whose content starts at `from`; -1 if none. */
function closingQuote(bytes: Uint8Array, from: number): number {
  for (let q = bytes.indexOf(0x22, from); q >= 0; q = bytes.indexOf(0x22, q + 1)) {
    // Escapes pair up from the start of a backslash run: an odd run escapes the quote.
    let run = 0;
    while (q - run - 1 >= from && bytes[q - run - 1] === 0x5c) run++;
    if (run % 2 === 0) return q;
  }
  return -1;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Parses a JSON body with a schema at the edge; a body over `maxBytes` (MAX_BODY_BYTES by default),
 * invalid UTF-8, malformed JSON, nesting deeper than MAX_JSON_DEPTH and schema violations are 400s.
 */
export async function parseJson<S extends z.ZodType>(
  c: Context,
  schema: S,
  what = "request body",
  maxBytes?: number,
): Promise<z.output<S>> {
  const bytes = await readBody(c, maxBytes);
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw new ServiceError("invalid_request", `${what} must be UTF-8 encoded JSON`);
  }
  // Before JSON.parse, so nothing downstream ever holds a value deeper than the limit.
  if (nestedDeeperThan(bytes, MAX_JSON_DEPTH)) {
    throw new ServiceError(
      "invalid_request",
      `${what} is nested deeper than ${MAX_JSON_DEPTH} levels of objects and arrays`,
      { details: { max_depth: MAX_JSON_DEPTH } },
    );
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
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
    return c.json(errorBodyFor(c.req.path, err), httpStatusFor(err.code), headers);
  }
  if (err instanceof HTTPException) {
    const code = err.status === 404 ? "not_found" : "invalid_request";
    return c.json(
      errorBodyFor(c.req.path, new ServiceError(code, err.message)),
      httpStatusFor(code),
    );
  }
  log.error({ err }, "unhandled error");
  return c.json(errorBodyFor(c.req.path, new ServiceError("internal", "internal error")), 500);
}
