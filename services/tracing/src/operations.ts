// Tracing's operations in the OpenAPI document (routes.ts).
import { z } from "zod";
import {
  jsonAnswer,
  ClusterTraceListSchema,
  TraceListSchema,
  TracingBodySchema,
  TracingStatusSchema,
} from "@ic/protocol";
import type { ApiOperation } from "@ic/protocol";
import { TracesQuerySchema } from "./routes.ts";
import { TraceStatsSchema } from "./trace.ts";

const ClusterTraceStatsSchema = z
  .object({ foundOn: z.string(), unreachable: z.array(z.unknown()) })
  .passthrough();

export const TRACING_OPERATIONS: readonly ApiOperation[] = [
  {
    method: "get",
    path: "/v1/tracing",
    summary: "whether this node saves traces",
    scope: "read",
    responses: { "200": jsonAnswer("the status", TracingStatusSchema) },
  },
  {
    method: "put",
    path: "/v1/tracing",
    summary: "switch tracing on or off on this node",
    scope: "admin",
    body: TracingBodySchema,
    responses: { "200": jsonAnswer("the status", TracingStatusSchema) },
  },
  {
    method: "get",
    path: "/v1/traces",
    summary: "this node's traces, newest first",
    scope: "read",
    query: TracesQuerySchema,
    responses: { "200": jsonAnswer("the traces", TraceListSchema) },
  },
  {
    method: "get",
    path: "/v1/traces/{task_id}",
    summary: "one trace file (Chrome trace events)",
    scope: "read",
    responses: { "200": jsonAnswer("the trace") },
  },
  {
    method: "get",
    path: "/v1/traces/{task_id}/stats",
    summary: "one trace's timing summary",
    scope: "read",
    responses: { "200": jsonAnswer("the stats", TraceStatsSchema) },
  },
  {
    method: "get",
    path: "/v1/traces/cluster",
    summary: "every live node's traces",
    scope: "read",
    query: TracesQuerySchema,
    responses: { "200": jsonAnswer("the traces", ClusterTraceListSchema) },
  },
  {
    method: "get",
    path: "/v1/traces/cluster/{task_id}/stats",
    summary: "a trace's stats from whichever node has it",
    scope: "read",
    responses: { "200": jsonAnswer("the stats", ClusterTraceStatsSchema) },
  },
];
