// The event log's operation in the OpenAPI document (routes.ts).
import { z } from "zod";
import { jsonAnswer } from "@ic/protocol";
import type { ApiOperation } from "@ic/protocol";
import { EventsQuerySchema } from "./routes.ts";
import { EventRecordSchema } from "./record.ts";

const EventsResponseSchema = z.object({
  mode: z.enum(["normal", "counting-only"]),
  usage: z.record(z.string(), z.unknown()),
  records: z.array(EventRecordSchema),
});

export const EVENT_LOG_OPERATIONS: readonly ApiOperation[] = [
  {
    method: "get",
    path: "/events",
    summary: "this node's durable event log",
    scope: "read",
    query: EventsQuerySchema,
    responses: { "200": jsonAnswer("the records", EventsResponseSchema) },
  },
];
