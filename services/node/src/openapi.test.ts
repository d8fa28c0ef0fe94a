// The OpenAPI document against docs/api.md: every endpoint the reference documents is in the
// document and every operation of the document is documented.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "@ic/testkit";
import { API_OPERATIONS, apiDocument } from "./openapi.ts";

const norm = (method: string, path: string) =>
  `${method.toUpperCase()} ${path.split("?")[0]!.replace(/\{[^}]+\}/g, "{}")}`;

/** `METHOD /path` of every endpoint heading, and of the Tracing section's list items. */
function documented(md: string): Set<string> {
  const out = new Set<string>();
  const take = (text: string) => {
    for (const m of text.matchAll(
      /\b((?:GET|POST|PUT|DELETE|HEAD)(?:\|(?:GET|POST|PUT|DELETE|HEAD))*) (\/[^\s`,]*)/g,
    ))
      for (const method of m[1]!.split("|")) out.add(norm(method, m[2]!));
  };
  let section = "";
  for (const line of md.split("\n")) {
    if (line.startsWith("## ")) {
      section = line;
      take(line);
    } else if (section === "## Tracing" && line.startsWith("- `"))
      take(line.slice(0, line.indexOf("`", 3) + 1));
  }
  return out;
}

describe("GET /openapi.json", () => {
  const doc = apiDocument() as { openapi: string; paths: Record<string, Record<string, unknown>> };

  it("is an OpenAPI 3.1 document with every operation of the table", () => {
    expect(doc.openapi).toBe("3.1.0");
    const inDoc = Object.entries(doc.paths).flatMap(([p, ops]) =>
      Object.keys(ops).map((m) => norm(m, p)),
    );
    expect(new Set(inDoc)).toEqual(new Set(API_OPERATIONS.map((o) => norm(o.method, o.path))));
    expect(JSON.parse(JSON.stringify(doc))).toEqual(doc);
  });

  it("lists exactly the endpoints docs/api.md documents", () => {
    const md = readFileSync(`${REPO_ROOT}/docs/api.md`, "utf8");
    const fromDocs = documented(md);
    const fromTable = new Set(API_OPERATIONS.map((o) => norm(o.method, o.path)));
    expect(
      [...fromTable].filter((e) => !fromDocs.has(e)),
      "in the document, not in docs/api.md",
    ).toEqual([]);
    expect(
      [...fromDocs].filter((e) => !fromTable.has(e)),
      "in docs/api.md, not in the document",
    ).toEqual([]);
  });

  it("describes requests with the handlers' schemas: required fields, query parameters, scopes", () => {
    const place = doc.paths["/place_instance"]!["post"] as {
      requestBody: {
        content: {
          "application/json": { schema: { required?: string[]; additionalProperties?: boolean } };
        };
      };
      security: unknown[];
    };
    const schema = place.requestBody.content["application/json"].schema;
    expect(schema.required).toEqual(["model_id"]);
    expect(schema.additionalProperties).toBe(false);
    expect(place.security).toEqual([{ bearer: ["admin"] }]);
    const previews = doc.paths["/instance/previews"]!["get"] as {
      parameters: { name: string; required: boolean }[];
    };
    expect(previews.parameters).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ name: "model_id", required: true }),
        expect.objectContaining({ name: "excluded_node_ids", required: false }),
      ]),
    );
    expect((doc.paths["/health"]!["get"] as { security: unknown[] }).security).toEqual([]);
  });
});
