import { describe, expect, it } from "vitest";
import { z } from "zod";
import { validationError } from "./errors.ts";

const Schema = z
  .object({
    model_id: z.string(),
    excluded_nodes: z.array(z.string()).optional(),
    min_nodes: z.number().int().min(1).max(64).optional(),
    sharding: z.enum(["Pipeline", "Tensor"]).optional(),
    name: z.string().min(2).max(4).optional(),
    tags: z.array(z.string()).max(1).optional(),
    id: z.string().regex(/^i-/).optional(),
    secret: z.string().min(16, "at least 16 characters").optional(),
    prompt: z.union([z.string(), z.array(z.string())]).optional(),
  })
  .strict();

const message = (input: unknown) => {
  const r = Schema.safeParse(input);
  if (r.success) throw new Error("expected a refusal");
  return validationError(r.error, "request body").message;
};

describe("validation errors in words", () => {
  it.each([
    [{}, "request body: model_id is required (a string)"],
    [{ model_id: 3 }, "request body: model_id must be a string, not a number"],
    [
      { model_id: "m", excluded_nodes: "a" },
      "request body: excluded_nodes must be an array, not a string",
    ],
    [{ model_id: "m", min_nodes: 0 }, "request body: min_nodes must be at least 1"],
    [{ model_id: "m", min_nodes: 65 }, "request body: min_nodes must be at most 64"],
    [{ model_id: "m", min_nodes: 1.5 }, "request body: min_nodes must be an integer, not a number"],
    [
      { model_id: "m", sharding: "Row" },
      'request body: sharding must be one of "Pipeline", "Tensor"',
    ],
    [{ model_id: "m", name: "a" }, "request body: name must have at least 2 characters"],
    [{ model_id: "m", tags: ["a", "b"] }, "request body: tags must have at most 1 item"],
    [{ model_id: "m", id: "x" }, "request body: id has the wrong form (must match pattern /^i-/)"],
    [{ model_id: "m", surprise: 1 }, 'request body has unknown field "surprise"'],
    [{ model_id: "m", a: 1, b: 2 }, 'request body has unknown fields "a", "b"'],
    // A schema's own words are kept, after a colon.
    [{ model_id: "m", secret: "short" }, "request body: secret: at least 16 characters"],
    ["x", "request body must be an object, not a string"],
    [
      { model_id: "m", prompt: 3 },
      "request body: prompt must be a string or an array, not a number",
    ],
  ])("%j -> %s", (input, want) => {
    expect(message(input)).toBe(want);
  });

  it("keeps every issue (up to 10) in details, each with its path", () => {
    const r = Schema.safeParse({ min_nodes: 0 });
    const e = validationError(r.error!, "request body");
    expect(e.code).toBe("invalid_request");
    expect(e.details).toEqual({
      issues: [
        { path: "model_id", message: "is required (a string)" },
        { path: "min_nodes", message: "must be at least 1" },
      ],
    });
  });
});
