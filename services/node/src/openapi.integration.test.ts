// Real answers of a running node against the OpenAPI document's schemas: the JSON bodies of the main
// endpoints parse with the response schema of their operation, errors with the envelope's, and the
// node serves the same document at GET /openapi.json.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { z } from "zod";
import { ErrorEnvelopeSchema } from "@ic/protocol";
import { placeAndWait, seedStore, startCluster, waitForConvergence } from "@ic/testkit";
import { API_OPERATIONS, apiDocument } from "./openapi.ts";

function schemaOf(method: string, path: string, status: string): z.ZodType {
  const op = API_OPERATIONS.find((o) => o.method === method && o.path === path);
  const s = op?.responses[status]?.schema;
  if (!s) throw new Error(`no ${status} schema for ${method} ${path} in the table`);
  return s;
}

describe("real answers match the OpenAPI document", () => {
  it("the main endpoints' bodies and error envelopes parse with the document's schemas", async () => {
    const { store, modelId } = await seedStore(mkdtempSync(join(tmpdir(), "ic-store-")));
    await using cluster = await startCluster(1, { config: () => ({ store_path: store }) });
    const [node] = cluster.nodes;
    await waitForConvergence(cluster.nodes, 1);
    const inst = await placeAndWait(node!, { model_id: modelId, min_nodes: 1 });
    const base = node!.apiUrl;
    const call = async (method: string, path: string, body?: unknown) => {
      const r = await fetch(`${base}${path}`, {
        method,
        headers: { "content-type": "application/json" },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return { status: r.status, json: (await r.json()) as unknown };
    };
    const checks: [string, string, string, unknown?][] = [
      ["get", "/state", "/state"],
      ["get", "/instance/previews", `/instance/previews?model_id=${modelId}`],
      ["get", "/instances", "/instances"],
      ["get", "/v1/models", "/v1/models"],
      ["get", "/v1/ping", "/v1/ping"],
      ["get", "/health", "/health"],
      ["get", "/store/storage", "/store/storage"],
      ["get", "/store/pulls", "/store/pulls"],
      ["get", "/store/models", "/store/models"],
      ["get", "/store/models/{org}/{name}/manifest", `/store/models/${modelId}/manifest`],
      ["get", "/store/staged/{org}/{name}/pieces", `/store/staged/${modelId}/pieces`],
      ["get", "/events", "/events?limit=20"],
      ["get", "/v1/diagnostics/telemetry", "/v1/diagnostics/telemetry"],
      ["get", "/logs", "/logs?tail=5"],
      ["get", "/instances/{instance_id}/logs", `/instances/${inst.instance_id}/logs?tail=5`],
      ["get", "/v1/tracing", "/v1/tracing"],
      ["get", "/v1/traces", "/v1/traces"],
      ["get", "/v1/traces/cluster", "/v1/traces/cluster"],
      [
        "post",
        "/v1/chat/completions",
        "/v1/chat/completions",
        { model: modelId, messages: [{ role: "user", content: "hi" }], max_tokens: 2 },
      ],
      ["post", "/store/purge-staging", "/store/purge-staging", {}],
    ];
    for (const [method, path, url, body] of checks) {
      const r = await call(method.toUpperCase(), url, body);
      expect(r.status, `${method} ${url}: ${JSON.stringify(r.json).slice(0, 300)}`).toBe(200);
      const parsed = schemaOf(method, path, "200").safeParse(r.json);
      expect(parsed.success, `${method} ${url}: ${JSON.stringify(parsed.error?.issues)}`).toBe(
        true,
      );
    }
    // Errors: the envelope, with the documented statuses.
    for (const [method, url, body, status] of [
      ["POST", "/place_instance", { model_id: "org/none" }, 404],
      ["POST", "/place_instance", { model_id: "../x" }, 400],
      ["GET", "/instance/previews", undefined, 400],
      ["DELETE", "/instance/i-none", undefined, 404],
      [
        "POST",
        "/v1/chat/completions",
        { model: "org/none", messages: [{ role: "user", content: "x" }] },
        404,
      ],
      ["GET", "/nope", undefined, 404],
    ] as const) {
      const r = await call(method, url, body);
      expect(r.status, `${method} ${url}`).toBe(status);
      expect(ErrorEnvelopeSchema.safeParse(r.json).success, `${method} ${url}`).toBe(true);
    }
    // The node serves the document this test checked against.
    expect((await call("GET", "/openapi.json")).json).toEqual(apiDocument());
  }, 120_000);
});
