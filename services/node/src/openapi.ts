// The node HTTP API's OpenAPI document, served at GET /openapi.json: every service's table of
// operations (each beside its routes) and the node's own (reload, health, the peer watch,
// observability). Each entry names the zod schemas its handler validates with (requests) and answers
// with (responses), so the document cannot drift from the code; openapi.test.ts compares it with
// docs/api.md and with real answers.
import type { Hono } from "hono";
import {
  HealthResponseSchema,
  jsonAnswer,
  NodeLogsResponseSchema,
  openApiDocument,
  RunnerLogsResponseSchema,
  sseAnswer,
  TelemetryDiagnosticsSchema,
} from "@ic/protocol";
import type { ApiOperation } from "@ic/protocol";
import { DASHBOARD_OPERATIONS } from "@ic/dashboard";
import { EVENT_LOG_OPERATIONS } from "@ic/eventlog";
import { GATEWAY_OPERATIONS } from "@ic/gateway";
import { STORE_OPERATIONS } from "@ic/store";
import { TRACING_OPERATIONS } from "@ic/tracing";
import { KV_MOVE_OPERATIONS } from "@ic/worker";
import { NodeLogsQuerySchema } from "./observability/node-logs.ts";
import { RunnerLogsQuerySchema } from "./observability/runner-logs.ts";
import { SeriesAnswerSchema, SeriesQuerySchema } from "./observability/series.ts";
import { WatchQuerySchema } from "./peer-watch.ts";
import { ReloadResponseSchema } from "./reload.ts";

/** The routes services/node serves itself. */
const NODE_OPERATIONS: readonly ApiOperation[] = [
  {
    method: "post",
    path: "/admin/reload",
    summary:
      "read the config file again and put its auth.tokens and renewed TLS files in force at once (as SIGHUP does); a file that does not load changes nothing",
    scope: "admin",
    responses: {
      "200": jsonAnswer(
        "the token names in force, what changed, and whether the TLS files were reloaded",
        ReloadResponseSchema,
      ),
    },
  },
  {
    method: "get",
    path: "/health",
    summary: "200 once started and synced to a session; 503 with the reason otherwise",
    scope: "public",
    responses: { "200": jsonAnswer("healthy", HealthResponseSchema) },
  },
  {
    method: "get",
    path: "/cluster/watch",
    summary: "node to node: the watch connection of the fast failure signal",
    scope: "read",
    query: WatchQuerySchema,
    responses: { "200": sseAnswer("held open; a comment every 15 s") },
  },
  {
    method: "get",
    path: "/metrics",
    summary: "Prometheus metrics of this node",
    scope: "read",
    responses: { "200": { description: "the text exposition format", contentType: "text/plain" } },
  },
  {
    method: "get",
    path: "/v1/diagnostics/telemetry",
    summary: "this node's telemetry-plane pressure",
    scope: "read",
    responses: { "200": jsonAnswer("the diagnostics", TelemetryDiagnosticsSchema) },
  },
  {
    method: "get",
    path: "/v1/diagnostics/series",
    summary:
      "the dashboard's charts: the last hour of this node's requests, tokens/s, TTFT and every node's memory (scope=cluster: every live node's)",
    scope: "read",
    query: SeriesQuerySchema,
    responses: {
      "200": jsonAnswer(
        "this node's series, or with scope=cluster every node's",
        SeriesAnswerSchema,
      ),
    },
  },
  {
    method: "get",
    path: "/logs",
    summary: "this node's own log lines (follow=1: SSE)",
    scope: "read",
    query: NodeLogsQuerySchema,
    responses: { "200": jsonAnswer("the lines", NodeLogsResponseSchema) },
  },
  {
    method: "get",
    path: "/instances/{instance_id}/logs",
    summary: "the end of one runner's log file, from any node",
    scope: "read",
    query: RunnerLogsQuerySchema,
    responses: {
      "200": jsonAnswer("the lines (format=text: text/plain)", RunnerLogsResponseSchema),
    },
  },
  {
    method: "get",
    path: "/openapi.json",
    summary: "this document",
    scope: "public",
    responses: { "200": jsonAnswer("the OpenAPI 3.1 document") },
  },
];

export const API_OPERATIONS: readonly ApiOperation[] = [
  ...GATEWAY_OPERATIONS,
  ...STORE_OPERATIONS,
  ...EVENT_LOG_OPERATIONS,
  ...TRACING_OPERATIONS,
  ...DASHBOARD_OPERATIONS,
  ...NODE_OPERATIONS,
  ...KV_MOVE_OPERATIONS,
];

/** The document, built once per process. */
let built: Record<string, unknown> | undefined;
export function apiDocument(): Record<string, unknown> {
  built ??= openApiDocument(
    { title: "inference-cluster node API", version: "0.1.0" },
    API_OPERATIONS,
  );
  return built;
}

export function openApiRoutes(app: Hono): void {
  app.get("/openapi.json", (c) => c.json(apiDocument()));
}
