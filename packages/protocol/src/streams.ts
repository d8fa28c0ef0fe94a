// Resumable streams across gateways: what a gateway tells the others when it starts a stream that a
// client may read again through any node (the conversation's instance and the engine's key for it),
// and when a client resumed one (its first gateway then keeps the generation going).
import { z } from "zod";
import { CommandIdSchema, InstanceIdSchema } from "./ids.ts";

/** A conversation id as clients send it (`X-Conversation-Id`): 1–128 visible ASCII characters. */
export const ConversationIdSchema = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[\x21-\x7e]+$/, "must be 1-128 visible ASCII characters");

export const StreamNoticeSchema = z.discriminatedUnion("type", [
  z.object({
    type: z.literal("started"),
    conversation_id: ConversationIdSchema,
    /** The name of the API token that started it (null: anonymous); only it may read it again. */
    token: z.string().max(256).nullable(),
    /** The request's command id: its answer's id, and the engine's key for the stream. */
    command_id: CommandIdSchema,
    instance_id: InstanceIdSchema,
    /** The endpoint it came in on (its stream's dialect). */
    path: z.string().max(64),
    /** When the engine forgets it (ms since the epoch). */
    expires_at: z.number(),
  }),
  z.object({ type: z.literal("resumed"), command_id: CommandIdSchema }),
]);
export type StreamNotice = z.infer<typeof StreamNoticeSchema>;
export type StreamStarted = Extract<StreamNotice, { type: "started" }>;
