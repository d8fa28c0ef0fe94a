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

/**
 * A prompt a gateway sent to an instance (routing on the prompt caches): its whole blocks and the
 * chained hash of the last one (services/gateway prompt-blocks.ts). The other gateways record it in
 * their prompt-cache maps, so a conversation whose turns come through several gateways is known to
 * each of them.
 */
export const PromptNoticeSchema = z.object({
  instance_id: InstanceIdSchema,
  blocks: z.number().int().min(1).max(1_000_000),
  last: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
  /** The request's sampling seed, which names the engine slot that holds the prompt (kv-move.ts). */
  seed: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER).optional(),
  /**
   * The chained hashes of the prompt's first 1, 2, 3, 4, 6, 8, 12 ... blocks (below `blocks`): how
   * much of another prompt it shares, to within a third, in a few hashes whatever its length.
   */
  marks: z.array(z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER)).max(64).optional(),
  /**
   * The prompt whose slot this one took on the instance (a conversation's earlier turn, or another
   * prompt of the same system prompt): the receivers drop it as the sender did.
   */
  replaces: z
    .object({
      blocks: z.number().int().min(1).max(1_000_000),
      last: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
    })
    .optional(),
});
export type PromptNotice = z.infer<typeof PromptNoticeSchema>;

/** The prompts a gateway routed in one turn of its event loop: one bus message, after the sends. */
export const PromptNoticesSchema = z.object({
  prompts: z.array(PromptNoticeSchema).min(1).max(4096),
});
export type PromptNotices = z.infer<typeof PromptNoticesSchema>;
