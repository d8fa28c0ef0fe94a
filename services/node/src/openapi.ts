// The node HTTP API as a table of operations, built into the OpenAPI document served at
// GET /openapi.json. Each entry names the zod schemas its handler validates with (requests) and
// answers with (responses), so the document cannot drift from the code; openapi.test.ts compares it
// with docs/api.md and with real answers.
import type { Hono } from "hono";
import { z } from "zod";
import {
  ChatCompletionSchema,
  ChatRequestSchema,
  ClusterStorageSchema,
  CompletionRequestSchema,
  ClusterTraceListSchema,
  DeleteInstanceResponseSchema,
  DrainResponseSchema,
  EmbeddingListSchema,
  EmbeddingRequestSchema,
  HealthResponseSchema,
  InstanceListSchema,
  ModelEntrySchema,
  ModelListResponseSchema,
  NodeLogsResponseSchema,
  openApiDocument,
  PingResponseSchema,
  PlaceRequestSchema,
  PlaceResponseSchema,
  PreviewQuerySchema,
  PreviewResponseSchema,
  PullBodySchema,
  PullListResponseSchema,
  PullCancelResponseSchema,
  PullResponseSchema,
  PurgeResponseSchema,
  PurgeStagingBodySchema,
  RemoveModelResponseSchema,
  RestartResponseSchema,
  RunnerLogsResponseSchema,
  StateDocumentSchema,
  StateQuerySchema,
  StorageReportSchema,
  StoreHostResponseSchema,
  StoreManifestSchema,
  StoreModelListSchema,
  UploadAbortResponseSchema,
  UploadCommitResponseSchema,
  UploadFileResponseSchema,
  TelemetryDiagnosticsSchema,
  TextCompletionSchema,
  TraceListSchema,
  TracingBodySchema,
  TracingStatusSchema,
} from "@ic/protocol";
import type { ApiOperation } from "@ic/protocol";
import { EventRecordSchema, EventsQuerySchema } from "@ic/eventlog";
import { TracesQuerySchema, TraceStatsSchema } from "@ic/tracing";
import { NodeLogsQuerySchema } from "./observability/node-logs.ts";
import { RunnerLogsQuerySchema } from "./observability/runner-logs.ts";
import { WatchQuerySchema } from "./peer-watch.ts";
import { ReloadResponseSchema } from "./reload.ts";
import { SeriesAnswerSchema, SeriesQuerySchema } from "./observability/series.ts";
import { DASHBOARD_ASSETS, SettingsEditSchema, SettingsViewSchema } from "@ic/dashboard";

const ok = (description: string, schema?: z.ZodType) => ({
  description,
  ...(schema ? { schema } : {}),
});
const sse = (description: string) => ({ description, contentType: "text/event-stream" });

const EventsResponseSchema = z.object({
  mode: z.enum(["normal", "counting-only"]),
  usage: z.record(z.string(), z.unknown()),
  records: z.array(EventRecordSchema),
});
const ClusterTraceStatsSchema = z
  .object({ foundOn: z.string(), unreachable: z.array(z.unknown()) })
  .passthrough();

export const API_OPERATIONS: readonly ApiOperation[] = [
  {
    method: "get",
    path: "/state",
    summary: "the replica of the control state and this node's live view",
    scope: "read",
    query: StateQuerySchema,
    responses: { "200": ok("the state document", StateDocumentSchema) },
  },
  {
    method: "get",
    path: "/state/stream",
    summary:
      "the state document as Server-Sent Events: at once, on each change, every heartbeat period",
    scope: "read",
    query: StateQuerySchema,
    responses: { "200": sse("`event: state` with the document as data; held open") },
  },
  {
    method: "post",
    path: "/place_instance",
    summary: "place an instance of a registered model (synchronous; typed refusals)",
    scope: "admin",
    body: PlaceRequestSchema,
    responses: { "200": ok("placed and sequenced", PlaceResponseSchema) },
  },
  {
    method: "get",
    path: "/instance/previews",
    summary: "every placement combination with its memory use or its refusal",
    scope: "read",
    query: PreviewQuerySchema,
    responses: { "200": ok("the previews", PreviewResponseSchema) },
  },
  {
    method: "delete",
    path: "/instance/{instance_id}",
    summary: "tear an instance down and delete its deployment",
    scope: "admin",
    responses: { "200": ok("deleted", DeleteInstanceResponseSchema) },
  },
  {
    method: "get",
    path: "/instances",
    summary: "the current instances",
    scope: "read",
    responses: { "200": ok("the instances", InstanceListSchema) },
  },
  {
    method: "post",
    path: "/v1/chat/completions",
    summary: "OpenAI-compatible chat completion, routed to a ready instance",
    scope: "inference",
    headers: z.object({
      "x-ic-migrate": z
        .enum(["0", "1"])
        .describe(
          "stream migration for this request: 1 on, 0 off (default: chat.migrate_streams); docs/api.md",
        ),
    }),
    body: ChatRequestSchema,
    responses: {
      "200": {
        description: "the completion (JSON), or with stream: true a text/event-stream of chunks",
        schema: ChatCompletionSchema,
      },
    },
  },
  {
    method: "post",
    path: "/v1/completions",
    summary: "OpenAI-compatible text completion, routed as chat is",
    scope: "inference",
    body: CompletionRequestSchema,
    responses: {
      "200": {
        description: "the completion (JSON), or with stream: true a text/event-stream of chunks",
        schema: TextCompletionSchema,
      },
    },
  },
  {
    method: "post",
    path: "/v1/embeddings",
    summary:
      "OpenAI-compatible embeddings, from instances placed with embeddings: true (routed as chat is)",
    scope: "inference",
    body: EmbeddingRequestSchema,
    responses: { "200": ok("the embedding list", EmbeddingListSchema) },
  },
  {
    method: "get",
    path: "/v1/models/{model_id}",
    summary: "one model, when it is ready and the token may use it",
    scope: "inference",
    responses: { "200": ok("the model", ModelEntrySchema) },
  },
  {
    method: "get",
    path: "/v1/models",
    summary: "models with a ready instance that the token may use",
    scope: "inference",
    responses: { "200": ok("the models", ModelListResponseSchema) },
  },
  {
    method: "post",
    path: "/admin/restart",
    summary: "restart this node's process image",
    scope: "admin",
    responses: { "202": ok("restarting", RestartResponseSchema) },
  },
  {
    method: "post",
    path: "/admin/drain",
    summary: "drain this node (no new requests; those in flight finish), then stop it",
    scope: "admin",
    responses: { "202": ok("draining", DrainResponseSchema) },
  },
  {
    method: "post",
    path: "/admin/reload",
    summary:
      "read the config file again and put its auth.tokens and renewed TLS files in force at once (as SIGHUP does); a file that does not load changes nothing",
    scope: "admin",
    responses: {
      "200": ok(
        "the token names in force, what changed, and whether the TLS files were reloaded",
        ReloadResponseSchema,
      ),
    },
  },
  {
    method: "get",
    path: "/v1/ping",
    summary: "liveness ping (peers measure links with it)",
    scope: "public",
    responses: { "200": ok("here", PingResponseSchema) },
  },
  {
    method: "get",
    path: "/health",
    summary: "200 once started and synced to a session; 503 with the reason otherwise",
    scope: "public",
    responses: { "200": ok("healthy", HealthResponseSchema) },
  },
  {
    method: "get",
    path: "/cluster/watch",
    summary: "node to node: the watch connection of the fast failure signal",
    scope: "read",
    query: WatchQuerySchema,
    responses: { "200": sse("held open; a comment every 15 s") },
  },
  {
    method: "get",
    path: "/store/storage",
    summary: "this node's storage report",
    scope: "read",
    responses: { "200": ok("the report", StorageReportSchema) },
  },
  {
    method: "get",
    path: "/store/storage/cluster",
    summary: "every live node's storage report (peers asked with the node token, 2 s each)",
    scope: "read",
    responses: { "200": ok("the reports and the nodes that did not answer", ClusterStorageSchema) },
  },
  {
    method: "post",
    path: "/store/purge-staging",
    summary: "purge staged copies not in use, on every node",
    scope: "admin",
    body: PurgeStagingBodySchema,
    responses: { "200": ok("what each node deleted", PurgeResponseSchema) },
  },
  {
    method: "post",
    path: "/store/pulls",
    summary:
      "pull a model from the model hub into the store: one quantization (`quant`, else Q4_K_M, else the smallest), its projector and metadata; resumes a cancelled one",
    scope: "admin",
    body: PullBodySchema,
    responses: {
      "202": ok("the pull, queued (or resumed)", PullResponseSchema),
      "200": ok("the pull of that model already queued or running", PullResponseSchema),
    },
  },
  {
    method: "get",
    path: "/store/pulls",
    summary: "the store host's pulls",
    scope: "read",
    responses: { "200": ok("the pulls", PullListResponseSchema) },
  },
  {
    method: "delete",
    path: "/store/pulls/{org}/{name}",
    summary:
      "cancel a queued or running pull (its partial files stay), or dismiss a finished one from the list",
    scope: "admin",
    responses: {
      "200": ok("the cancelled or dismissed pull", PullCancelResponseSchema),
    },
  },
  {
    method: "delete",
    path: "/store/models/{org}/{name}",
    summary: "take a model out of the registry and the store (refused while in use)",
    scope: "admin",
    responses: { "200": ok("removed", RemoveModelResponseSchema) },
  },
  {
    method: "get",
    path: "/store/models",
    summary: "store host: the registered models",
    scope: "read",
    responses: { "200": ok("the models", StoreModelListSchema) },
  },
  {
    method: "get",
    path: "/store/models/{org}/{name}/manifest",
    summary: "store host: a model's manifest",
    scope: "read",
    responses: { "200": ok("the manifest", StoreManifestSchema) },
  },
  {
    method: "get",
    path: "/store/models/{org}/{name}/files/{path}",
    summary: "store host: an artifact file (Range, If-Range)",
    scope: "read",
    responses: {
      "200": { description: "the file", contentType: "application/octet-stream" },
      "206": { description: "the requested range", contentType: "application/octet-stream" },
    },
  },
  {
    method: "head",
    path: "/store/models/{org}/{name}/files/{path}",
    summary: "store host: an artifact file's headers",
    scope: "read",
    responses: { "200": { description: "size and sha256 ETag" } },
  },
  {
    method: "get",
    path: "/store/host",
    summary: "the node that holds the store (uploads go to its API)",
    scope: "read",
    responses: { "200": ok("its name and API base URL", StoreHostResponseSchema) },
  },
  {
    method: "put",
    path: "/store/uploads/{org}/{name}/files/{path}",
    summary:
      "store host: receive one file of a model (raw bytes, content-length required) into the upload area",
    scope: "admin",
    responses: { "201": ok("the file received, with its sha256", UploadFileResponseSchema) },
  },
  {
    method: "post",
    path: "/store/uploads/{org}/{name}/commit",
    summary: "store host: move an upload into the store, where it registers like a copied model",
    scope: "admin",
    responses: { "200": ok("the files moved", UploadCommitResponseSchema) },
  },
  {
    method: "delete",
    path: "/store/uploads/{org}/{name}",
    summary: "store host: drop an upload that will not be committed",
    scope: "admin",
    responses: { "200": ok("dropped", UploadAbortResponseSchema) },
  },
  {
    method: "get",
    path: "/events",
    summary: "this node's durable event log",
    scope: "read",
    query: EventsQuerySchema,
    responses: { "200": ok("the records", EventsResponseSchema) },
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
    responses: { "200": ok("the diagnostics", TelemetryDiagnosticsSchema) },
  },
  {
    method: "get",
    path: "/v1/diagnostics/series",
    summary:
      "the dashboard's charts: the last hour of this node's requests, tokens/s, TTFT and every node's memory (scope=cluster: every live node's)",
    scope: "read",
    query: SeriesQuerySchema,
    responses: {
      "200": ok("this node's series, or with scope=cluster every node's", SeriesAnswerSchema),
    },
  },
  {
    method: "get",
    path: "/logs",
    summary: "this node's own log lines (follow=1: SSE)",
    scope: "read",
    query: NodeLogsQuerySchema,
    responses: { "200": ok("the lines", NodeLogsResponseSchema) },
  },
  {
    method: "get",
    path: "/instances/{instance_id}/logs",
    summary: "the end of one runner's log file, from any node",
    scope: "read",
    query: RunnerLogsQuerySchema,
    responses: { "200": ok("the lines (format=text: text/plain)", RunnerLogsResponseSchema) },
  },
  {
    method: "get",
    path: "/v1/tracing",
    summary: "whether this node saves traces",
    scope: "read",
    responses: { "200": ok("the status", TracingStatusSchema) },
  },
  {
    method: "put",
    path: "/v1/tracing",
    summary: "switch tracing on or off on this node",
    scope: "admin",
    body: TracingBodySchema,
    responses: { "200": ok("the status", TracingStatusSchema) },
  },
  {
    method: "get",
    path: "/v1/traces",
    summary: "this node's traces, newest first",
    scope: "read",
    query: TracesQuerySchema,
    responses: { "200": ok("the traces", TraceListSchema) },
  },
  {
    method: "get",
    path: "/v1/traces/{task_id}",
    summary: "one trace file (Chrome trace events)",
    scope: "read",
    responses: { "200": ok("the trace") },
  },
  {
    method: "get",
    path: "/v1/traces/{task_id}/stats",
    summary: "one trace's timing summary",
    scope: "read",
    responses: { "200": ok("the stats", TraceStatsSchema) },
  },
  {
    method: "get",
    path: "/v1/traces/cluster",
    summary: "every live node's traces",
    scope: "read",
    query: TracesQuerySchema,
    responses: { "200": ok("the traces", ClusterTraceListSchema) },
  },
  {
    method: "get",
    path: "/v1/traces/cluster/{task_id}/stats",
    summary: "a trace's stats from whichever node has it",
    scope: "read",
    responses: { "200": ok("the stats", ClusterTraceStatsSchema) },
  },
  {
    method: "get",
    path: "/admin/settings",
    summary: "this node's staging settings: its config file's sections and what it applies now",
    scope: "read",
    responses: { "200": ok("the settings", SettingsViewSchema) },
  },
  {
    method: "put",
    path: "/admin/settings",
    summary:
      "edit the staging settings: validated, written to the YAML file (comments kept), applied",
    scope: "admin",
    body: SettingsEditSchema,
    responses: { "200": ok("the settings after the edit", SettingsViewSchema) },
  },
  ...Object.entries(DASHBOARD_ASSETS).map(([path, a]): ApiOperation => ({
    method: "get",
    path,
    summary: path === "/" ? "the dashboard page" : `the dashboard's ${a.file}`,
    scope: "public",
    responses: { "200": { description: a.file, contentType: a.type.split(";")[0]! } },
  })),
  {
    method: "get",
    path: "/openapi.json",
    summary: "this document",
    scope: "public",
    responses: { "200": ok("the OpenAPI 3.1 document") },
  },
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
