// The prefix key of a chat request: what the engine's prompt cache can reuse from an earlier request
// of the same conversation. A conversation's turns all begin with the same leading messages (the
// system prompt and the first user message), so their key is the same and balancing.ts sends them to
// the same replica, where that prefix is already in the KV cache. Two conversations that share only a
// system prompt get different keys and spread over the replicas. Pure, so tables test it.
import { createHash } from "node:crypto";

/** The shape read here: a chat body's messages, or a completion's prompt. */
interface PrefixSource {
  readonly model: string;
  readonly messages?: readonly { readonly role: string; readonly content?: unknown }[] | undefined;
  readonly prompt?: unknown;
}

/** Characters of a plain completion's prompt that make its key (its leading block). */
export const PROMPT_PREFIX_CHARS = 2048;

/**
 * The key, or undefined when the request has nothing a later one could share (no messages, no
 * prompt). Chat: the messages up to and including the first user message; completion: the first
 * PROMPT_PREFIX_CHARS characters of the prompt. The model is part of the key.
 */
export function prefixKey(body: PrefixSource): string | undefined {
  let lead: unknown;
  if (body.messages && body.messages.length > 0) {
    const firstUser = body.messages.findIndex((m) => m.role === "user");
    const end = firstUser === -1 ? body.messages.length : firstUser + 1;
    lead = body.messages.slice(0, end).map((m) => [m.role, m.content ?? null]);
  } else if (typeof body.prompt === "string" && body.prompt.length > 0) {
    lead = body.prompt.slice(0, PROMPT_PREFIX_CHARS);
  } else if (Array.isArray(body.prompt) && typeof body.prompt[0] === "string") {
    lead = body.prompt[0].slice(0, PROMPT_PREFIX_CHARS);
  } else return undefined;
  return createHash("sha256")
    .update(JSON.stringify([body.model, lead]))
    .digest("base64url")
    .slice(0, 22);
}
