// A request's prompt as the chain of block hashes the prompt-cache map (prompt-cache.ts) compares:
// the prompt's items (system prompt, messages, tools, or a completion's prompt) in the order the
// engine's chat template renders them, one line each, cut into blocks of BLOCK_CHARS characters, each
// block's hash covering every character before it. Two prompts that share their first k blocks share
// their first k hashes, so "how much of this prompt does that instance hold" is one lookup per block.
// The gateway has no tokenizer: blocks are characters, and the map turns them into tokens with the
// ratio it learns from the engine's own counts. Pure, so tables test it.

/** Characters per block: the unit of a match (a prompt's last partial block never matches). */
export const BLOCK_CHARS = 128;

/** The shape read here (chat, Anthropic Messages, Responses, completion bodies). */
interface PromptSource {
  readonly model: string;
  readonly tools?: unknown;
  readonly system?: unknown;
  readonly messages?: readonly unknown[] | undefined;
  readonly instructions?: unknown;
  readonly input?: unknown;
  readonly prompt?: unknown;
}

export interface PromptBlocks {
  /** The chained hash of each whole block, in order (53-bit integers). */
  readonly hashes: readonly number[];
  /** Characters of the whole serialized prompt (the engine's token count is learned against it). */
  readonly chars: number;
}

/**
 * The prompt's text in render order: what comes before the turns (tools, system, instructions), then
 * one line per turn. A later turn of a conversation repeats the earlier ones, so its text begins
 * with the earlier request's (the answer the engine generated sits where the assistant turn is).
 */
export function promptText(body: PromptSource): string | undefined {
  const head: unknown[] = [body.model];
  if (body.tools !== undefined) head.push(body.tools);
  if (body.system !== undefined) head.push(body.system);
  if (body.instructions !== undefined) head.push(body.instructions);
  let items: readonly unknown[];
  if (body.messages && body.messages.length > 0) items = body.messages;
  else if (Array.isArray(body.input)) items = body.input as unknown[];
  else if (typeof body.input === "string" && body.input !== "") items = [body.input];
  else if (typeof body.prompt === "string" && body.prompt !== "") items = [body.prompt];
  else if (Array.isArray(body.prompt) && typeof body.prompt[0] === "string")
    items = [body.prompt[0]];
  else return undefined;
  let text = JSON.stringify(head);
  for (const item of items) text += `\n${itemText(item)}`;
  return text;
}

/**
 * One turn's text: a message of a role and a string (the common case, and most of a long prompt's
 * characters) as they are, without JSON's escaping pass over the content; anything else as JSON.
 */
function itemText(item: unknown): string {
  if (typeof item === "string") return item;
  const m = item as { role?: unknown; content?: unknown } | null;
  if (typeof m?.role === "string" && typeof m.content === "string" && Object.keys(m).length === 2)
    return `${m.role}\u0000${m.content}`;
  return JSON.stringify(item);
}

/**
 * The chained hashes of `text`'s whole blocks: two FNV-1a streams (different offsets), read at
 * each block's end and packed into 53 bits. Non-cryptographic on purpose: a collision costs one
 * request a cold prefill, and the hash runs over every prompt (bench figures in docs/benchmarks.md).
 */
export function chainHashes(text: string, blockChars = BLOCK_CHARS): number[] {
  const out: number[] = [];
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ 0x5bd1e995;
  for (let end = blockChars, i = 0; end <= text.length; end += blockChars) {
    for (; i < end; i++) {
      const c = text.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x01000193) ^ (b >>> 15);
    }
    out.push((a >>> 0) * 0x200000 + ((b >>> 0) & 0x1fffff));
  }
  return out;
}

/** The request's blocks, or undefined when it has no prompt a later one could share. */
export function promptBlocks(
  body: PromptSource,
  blockChars = BLOCK_CHARS,
): PromptBlocks | undefined {
  const text = promptText(body);
  if (text === undefined) return undefined;
  return { hashes: chainHashes(text, blockChars), chars: text.length };
}
