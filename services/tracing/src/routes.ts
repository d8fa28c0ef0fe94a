// The tracing endpoints, registered on the gateway's hono app by the launcher: GET/PUT /v1/tracing,
// GET /v1/traces, GET /v1/traces/{task_id}[/stats] and their cluster-wide views under /v1/traces/cluster.
// Queries, bodies and task ids are validated here (the HTTP edge); errors are ServiceErrors for the
// app's one error handler. Scopes come from the gateway's table (PUT: admin; GETs: read).
import type { Hono } from "hono";
import { z } from "zod";
import { parseJson, validationError } from "@ic/http";
import { ServiceError, TracingBodySchema } from "@ic/protocol";
import { clusterTraces, clusterTraceStats } from "./cluster.ts";
import type { FanOutOptions } from "./cluster.ts";
import { isValidTaskId } from "./files.ts";
import { traceStats } from "./trace.ts";
import type { TraceStats } from "./trace.ts";
import type { Tracing } from "./tracing.ts";

export const LIST_LIMIT_DEFAULT = 100;
export const LIST_LIMIT_MAX = 1000;

/** A PUT body is a one-field object; anything longer is not one. */
const MAX_PUT_BODY_BYTES = 4096;

export const TracesQuerySchema = z.object({
  limit: z.coerce.number().int().min(1).max(LIST_LIMIT_MAX).default(LIST_LIMIT_DEFAULT),
});

function taskIdParam(raw: string | undefined): string {
  const id = raw ?? "";
  if (!isValidTaskId(id))
    throw new ServiceError(
      "invalid_request",
      "task_id must be 1-128 characters of letters, digits, '-' and '_' (e.g. t-1f2e...)",
      { details: { issues: [{ path: "task_id", message: "invalid task id" }] } },
    );
  return id;
}

function limitOf(query: Record<string, string>): number {
  const parsed = TracesQuerySchema.safeParse(query);
  if (!parsed.success) throw validationError(parsed.error, "query");
  return parsed.data.limit;
}

export interface TracingRoutesOptions {
  readonly tracing: Tracing;
  /** This node's name (labels its part of the cluster view). */
  readonly node: string;
  readonly fanOut: FanOutOptions;
}

export function tracingRoutes(app: Hono, o: TracingRoutesOptions): void {
  const { tracing } = o;
  const localStats = async (taskId: string): Promise<TraceStats | undefined> => {
    const t = await tracing.files.read(taskId);
    return t ? traceStats(t) : undefined;
  };
  const notFound = (taskId: string, details?: Record<string, unknown>) =>
    new ServiceError("not_found", `no trace for task ${taskId}`, {
      details: { task_id: taskId, ...details },
    });

  app.get("/v1/tracing", (c) => c.json(tracing.status()));

  app.put("/v1/tracing", async (c) => {
    const body = await parseJson(c, TracingBodySchema, "body", MAX_PUT_BODY_BYTES);
    tracing.setEnabled(body.enabled);
    return c.json(tracing.status());
  });

  app.get("/v1/traces", async (c) => {
    const limit = limitOf(c.req.query());
    return c.json({ traces: await tracing.files.list(limit) });
  });

  app.get("/v1/traces/cluster", async (c) => {
    const limit = limitOf(c.req.query());
    return c.json(
      await clusterTraces({ name: o.node, list: () => tracing.files.list(limit) }, limit, o.fanOut),
    );
  });

  app.get("/v1/traces/cluster/:task_id/stats", async (c) => {
    const taskId = taskIdParam(c.req.param("task_id"));
    const r = await clusterTraceStats({ name: o.node, stats: localStats }, taskId, o.fanOut);
    if (!r.found) throw notFound(taskId, { unreachable: r.unreachable });
    return c.json({ ...r.stats, foundOn: r.foundOn, unreachable: r.unreachable });
  });

  // The trace file itself (Chrome trace event JSON), for nodes whose disk the caller cannot reach.
  app.get("/v1/traces/:task_id", async (c) => {
    const taskId = taskIdParam(c.req.param("task_id"));
    const t = await tracing.files.read(taskId);
    if (!t) throw notFound(taskId);
    return c.json(t);
  });

  app.get("/v1/traces/:task_id/stats", async (c) => {
    const taskId = taskIdParam(c.req.param("task_id"));
    const stats = await localStats(taskId);
    if (!stats) throw notFound(taskId);
    return c.json(stats);
  });
}
