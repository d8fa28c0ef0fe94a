// The stored shape of one event-log line and its conversion from an indexed control event.
// Defined here until the lead moves EventRecordSchema into @ic/protocol next to IndexedEventSchema.
import { z } from "zod";
import { ControlEventSchema, SessionIdSchema } from "@ic/protocol";
import type { IndexedEvent } from "@ic/protocol";

export const EventRecordSchema = z.object({
  /** Local sequence number of this log, strictly increasing across restarts and compactions. */
  seq: z.number().int().positive(),
  /** When the master sequenced the event (IndexedEvent.at, ms since the epoch). */
  at: z.number(),
  session_id: SessionIdSchema,
  /** The event's index in its cluster session. */
  index: z.number().int().positive(),
  /** Copy of event.type, so readers can filter without looking inside the payload. */
  type: z.string().min(1),
  event: ControlEventSchema,
});
export type EventRecord = z.infer<typeof EventRecordSchema>;

export function toRecord(seq: number, e: IndexedEvent): EventRecord {
  return {
    seq,
    at: e.at,
    session_id: e.session_id,
    index: e.index,
    type: e.event.type,
    event: e.event,
  };
}

/** One JSON line, newline-terminated. */
export function encodeRecord(r: EventRecord): string {
  return `${JSON.stringify(r)}\n`;
}

/** Cheap header of a stored line (seq and type) without validating the payload; null when unreadable. */
export function peekLine(line: string): { seq: number; type: string; value: unknown } | null {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return null;
  }
  if (typeof value !== "object" || value === null) return null;
  const { seq, type } = value as { seq?: unknown; type?: unknown };
  if (typeof seq !== "number" || typeof type !== "string") return null;
  return { seq, type, value };
}
