// The prefix key of a chat request: what the engine's prompt cache can reuse from an earlier request
// of the same conversation. A conversation's turns all begin with the same leading messages (the
// system prompt and the first user message), so their key is the same and balancing.ts sends them to
// the same replica, where that prefix is already in the KV cache. Two conversations that share only a
// system prompt get different keys and spread over the replicas. Pure, so tables test it.
import { createHash } from "node:crypto";

/**
 * The shape read here: a chat or Anthropic body's messages (with Anthropic's `system` beside them),
 * a Responses body's `instructions` and `input`, or a completion's prompt.
 */
interface PrefixSource {
  readonly model: string;
  readonly messages?: readonly { readonly role: string; readonly content?: unknown }[] | undefined;
  readonly system?: unknown;
  readonly instructions?: unknown;
  readonly input?: unknown;
  readonly prompt?: unknown;
}

/** The items up to and including the first user turn (all of them when there is none). */
function leadingTurns(items: readonly unknown[]): unknown[] {
  const firstUser = items.findIndex((m) => (m as { role?: unknown } | null)?.role === "user");
  const end = firstUser === -1 ? items.length : firstUser + 1;
  return items.slice(0, end).map((m) => {
    const t = m as { role?: unknown; content?: unknown; type?: unknown } | null;
    return [t?.role ?? t?.type ?? null, t?.content ?? null];
  });
}

/** Characters of a plain completion's prompt that make its key (its leading block). */
export const PROMPT_PREFIX_CHARS = 2048;

/**
 * The key, or undefined when the request has nothing a later one could share (no messages, no
 * prompt). Chat and Anthropic Messages: the system prompt and the messages up to and including the
 * first user message; Responses: the instructions and the input items up to the first user one (a
 * string input: its first PROMPT_PREFIX_CHARS characters); completion: the first PROMPT_PREFIX_CHARS
 * characters of the prompt. The model is part of the key.
 */
export function prefixKey(body: PrefixSource): string | undefined {
  let lead: unknown;
  if (body.messages && body.messages.length > 0) {
    const turns = leadingTurns(body.messages);
    lead = body.system === undefined ? turns : [body.system, turns];
  } else if (body.input !== undefined && body.input !== "") {
    const input = body.input;
    const turns = Array.isArray(input)
      ? leadingTurns(input)
      : String(input).slice(0, PROMPT_PREFIX_CHARS);
    lead = ["responses", body.instructions ?? null, turns];
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
