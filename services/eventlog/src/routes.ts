// GET /events: the diagnostic read of this node's event log, registered on the gateway's hono app.
// The query is validated here (the HTTP edge); errors are ServiceErrors for the app's one error handler.
import type { Hono } from "hono";
import { z } from "zod";
import { ControlEventSchema, ServiceError } from "@ic/protocol";
import type { EventLog } from "./event-log.ts";
import type { EventLogUsage } from "./options.ts";
import { READ_LIMIT_DEFAULT, READ_LIMIT_MAX } from "./options.ts";
import type { Mode } from "./policy.ts";
import type { EventRecord } from "./record.ts";

export const EVENT_TYPES = ControlEventSchema.options.map((o) => o.shape.type.value);

export const EventsQuerySchema = z.object({
  limit: z.coerce.number().int().min(1).max(READ_LIMIT_MAX).default(READ_LIMIT_DEFAULT),
  after_seq: z.coerce.number().int().min(0).optional(),
  type: z.enum(EVENT_TYPES).optional(),
});
export type EventsQuery = z.infer<typeof EventsQuerySchema>;

export interface EventsResponse {
  readonly mode: Mode;
  readonly usage: EventLogUsage;
  readonly records: EventRecord[];
}

export function eventRoutes(app: Hono, log: EventLog): void {
  app.get("/events", async (c) => {
    const parsed = EventsQuerySchema.safeParse(c.req.query());
    if (!parsed.success) {
      const issues = parsed.error.issues
        .slice(0, 10)
        .map((i) => ({ path: i.path.join("."), message: i.message }));
      const first = issues[0];
      throw new ServiceError(
        "invalid_request",
        first ? `query: ${first.path || "(query)"}: ${first.message}` : "query is invalid",
        { details: { issues } },
      );
    }
    const records = await log.read(parsed.data);
    const usage = log.usage();
    const body: EventsResponse = { mode: usage.mode, usage, records };
    return c.json(body);
  });
}
