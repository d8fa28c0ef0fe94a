// Builds the OpenAPI 3.1 document of the node HTTP API from a table of operations whose request and
// response parts are the zod schemas the handlers validate with (zod's own JSON Schema conversion):
// one source for the checks, the document and the tests that compare both with docs/api.md.
import { z } from "zod";
import { ErrorEnvelopeSchema } from "./http-api.ts";

export type ApiScope = "public" | "read" | "admin" | "inference";

export interface ApiResponse {
  readonly description: string;
  /** JSON body; absent for other content types. */
  readonly schema?: z.ZodType;
  /** Default application/json (with `schema`); e.g. text/event-stream, text/plain. */
  readonly contentType?: string;
}

export interface ApiOperation {
  readonly method: "get" | "post" | "put" | "delete" | "head";
  /** OpenAPI path template: `/store/models/{org}/{name}`. */
  readonly path: string;
  readonly summary: string;
  /** Who may call it (docs/api.md, "Authentication"). */
  readonly scope: ApiScope;
  readonly query?: z.ZodObject;
  /** Request headers the operation reads beyond authorization (name: schema; all optional). */
  readonly headers?: z.ZodObject;
  readonly body?: z.ZodType;
  /** By status code; every operation also answers errors in the envelope (`default`). */
  readonly responses: Readonly<Record<string, ApiResponse>>;
}

/** A JSON answer (with the schema it matches when it has one). */
export const jsonAnswer = (description: string, schema?: z.ZodType): ApiResponse => ({
  description,
  ...(schema ? { schema } : {}),
});
/** A Server-Sent Events answer. */
export const sseAnswer = (description: string): ApiResponse => ({
  description,
  contentType: "text/event-stream",
});

const jsonSchema = (s: z.ZodType, io: "input" | "output"): Record<string, unknown> => {
  const out = z.toJSONSchema(s, { io, unrepresentable: "any", target: "draft-2020-12" }) as Record<
    string,
    unknown
  >;
  delete out["$schema"];
  return out;
};

function parameters(op: ApiOperation): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const m of op.path.matchAll(/\{([^}]+)\}/g))
    out.push({ name: m[1], in: "path", required: true, schema: { type: "string" } });
  for (const [name, s] of Object.entries(op.query?.shape ?? {})) {
    const field = s as z.ZodType;
    out.push({
      name,
      in: "query",
      required: !field.safeParse(undefined).success,
      schema: jsonSchema(field, "input"),
    });
  }
  for (const [name, s] of Object.entries(op.headers?.shape ?? {}))
    out.push({ name, in: "header", required: false, schema: jsonSchema(s as z.ZodType, "input") });
  return out;
}

export function openApiDocument(
  info: { readonly title: string; readonly version: string },
  ops: readonly ApiOperation[],
): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const op of ops) {
    const responses: Record<string, unknown> = {};
    for (const [status, r] of Object.entries(op.responses)) {
      const type = r.contentType ?? "application/json";
      responses[status] = {
        description: r.description,
        ...(r.schema || r.contentType
          ? { content: { [type]: r.schema ? { schema: jsonSchema(r.schema, "output") } : {} } }
          : {}),
      };
    }
    responses["default"] = {
      description: "an error, in the error envelope",
      content: { "application/json": { schema: jsonSchema(ErrorEnvelopeSchema, "output") } },
    };
    const params = parameters(op);
    (paths[op.path] ??= {})[op.method] = {
      summary: op.summary,
      operationId: `${op.method}${op.path.replace(/[^A-Za-z0-9]+(.)?/g, (_, c: string) => (c ?? "").toUpperCase())}`,
      "x-scope": op.scope,
      security: op.scope === "public" ? [] : [{ bearer: [op.scope] }],
      ...(params.length ? { parameters: params } : {}),
      ...(op.body
        ? {
            requestBody: {
              required: true,
              content: { "application/json": { schema: jsonSchema(op.body, "input") } },
            },
          }
        : {}),
      responses,
    };
  }
  return {
    openapi: "3.1.0",
    info: {
      ...info,
      description:
        "Control plane of a cluster of LLM inference nodes: every node serves this API. Reference: docs/api.md.",
    },
    components: {
      securitySchemes: {
        bearer: {
          type: "http",
          scheme: "bearer",
          description: "an API token of auth.tokens; its scopes (read, admin, inference) decide",
        },
      },
    },
    paths,
  };
}
