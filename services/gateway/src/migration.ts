// Stream migration (opt-in, docs/api.md "Stream migration"), its pure parts: what the client got of a
// stream, the request that continues it elsewhere, and the continuation's events made the same answer.
import type { EngineTimings } from "@ic/protocol";

/** What the client got of a stream so far, read from the events relayed to it. */
export interface StreamSoFar {
  /** `created` and `model` of the first event (the continuation's events carry these instead). */
  created: unknown;
  model: unknown;
  /** The generated text relayed: `delta.content` and `delta.reasoning_content`, in order. */
  content: string;
  reasoning: string;
  /**
   * Events that carried generated text: llama-server streams one token an event (a character split
   * over tokens, or text held back by a partial stop string, puts a few tokens in one event).
   */
  tokens: number;
  /** A tool call was relayed: an assistant message with tool calls cannot be continued. */
  toolCalls: boolean;
  /** A finish_reason was relayed: the generation had ended, only its last events were lost. */
  finished: boolean;
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** The JSON payloads of complete SSE events (`data: {...}` lines); [DONE] and comments are skipped. */
export function eventPayloads(events: string): Json[] {
  const out: Json[] = [];
  for (const line of events.split("\n")) {
    if (!line.startsWith("data: ")) continue;
    const data = line.slice(6).trim();
    if (data === "[DONE]") continue;
    try {
      const v: unknown = JSON.parse(data);
      if (isObject(v)) out.push(v);
    } catch {
      // not JSON: nothing the transcript can read
    }
  }
  return out;
}

/** Reads the relayed events of a stream into a StreamSoFar (only for requests that opted in). */
export class Transcript {
  readonly sofar: StreamSoFar = {
    created: undefined,
    model: undefined,
    content: "",
    reasoning: "",
    tokens: 0,
    toolCalls: false,
    finished: false,
  };

  push(events: Buffer | string): void {
    for (const ev of eventPayloads(events.toString())) noteEvent(this.sofar, ev);
  }
}

/** Adds one chunk (`chat.completion.chunk`) to what the client got. */
export function noteEvent(s: StreamSoFar, ev: Json): void {
  if (s.created === undefined && ev.created !== undefined) s.created = ev.created;
  if (s.model === undefined && ev.model !== undefined) s.model = ev.model;
  const choices = Array.isArray(ev.choices) ? ev.choices : [];
  for (const choice of choices) {
    if (!isObject(choice)) continue;
    if (choice.finish_reason !== null && choice.finish_reason !== undefined) s.finished = true;
    const delta = choice.delta;
    if (!isObject(delta)) continue;
    let text = false;
    if (typeof delta.content === "string" && delta.content.length > 0) {
      s.content += delta.content;
      text = true;
    }
    if (typeof delta.reasoning_content === "string" && delta.reasoning_content.length > 0) {
      s.reasoning += delta.reasoning_content;
      text = true;
    }
    if (Array.isArray(delta.tool_calls) && delta.tool_calls.length > 0) s.toolCalls = true;
    if (text) s.tokens += 1;
  }
}

/** The request that continues a stream elsewhere, or why it cannot be continued. */
export type ContinuationPlan =
  | { readonly ok: true; readonly body: Json; readonly maxTokens: number | undefined }
  | { readonly ok: false; readonly why: string };

/**
 * The original chat request with what was generated so far as a trailing assistant message, which
 * llama-server continues (a prefill): `continue_final_message: true` with `add_generation_prompt:
 * false`, under which its stream carries only the new text (without them, a trailing assistant
 * message is continued too, but the first delta repeats it). A trailing assistant message of the
 * request itself (the client's own prefill) is extended rather than followed by a second one (which
 * llama-server refuses). The generation caps (`max_tokens`, `max_completion_tokens`, `n_predict`)
 * shrink by the tokens already sent.
 */
export function continuationRequest(body: Json, s: StreamSoFar): ContinuationPlan {
  if (s.toolCalls)
    return {
      ok: false,
      why: "a tool call was streamed (a message with tool calls is not continued)",
    };
  if (s.finished) return { ok: false, why: "the engine had finished the answer" };
  if (constrained(body))
    return { ok: false, why: "a grammar or response_format constrains the output from its start" };
  const messages = Array.isArray(body.messages) ? (body.messages as unknown[]) : undefined;
  if (!messages || messages.length === 0) return { ok: false, why: "the request has no messages" };
  const next: Json = { ...body };
  let maxTokens: number | undefined;
  for (const key of ["max_tokens", "max_completion_tokens", "n_predict"] as const) {
    const cap = body[key];
    if (typeof cap !== "number" || cap < 0) continue;
    const left = cap - s.tokens;
    if (left < 1) return { ok: false, why: `the answer had reached ${key} (${cap})` };
    next[key] = left;
    maxTokens = maxTokens === undefined ? left : Math.min(maxTokens, left);
  }
  // Nothing generated yet (only the role event was sent): the original request, as it was.
  if (s.content === "" && s.reasoning === "") return { ok: true, body: next, maxTokens };
  next.messages = withAssistantText(messages, s, body.continue_final_message === undefined);
  next.continue_final_message = true;
  next.add_generation_prompt = false;
  return { ok: true, body: next, maxTokens };
}

/**
 * Whether the output is held to a grammar (`grammar`, `json_schema`, a `response_format` other than
 * text): the engine would apply it to the continuation alone, as if it were the whole answer.
 */
function constrained(body: Json): boolean {
  if (body.grammar !== undefined || body.json_schema !== undefined) return true;
  const rf = body.response_format;
  return isObject(rf) && rf.type !== undefined && rf.type !== "text";
}

/**
 * `messages` ending with an assistant message holding what was generated. `echoed`: the request
 * ended with an assistant message continued without `continue_final_message`, so llama-server's
 * first delta repeated it and the generated content already starts with it.
 */
function withAssistantText(messages: unknown[], s: StreamSoFar, echoed: boolean): unknown[] {
  const last = messages.at(-1);
  const reasoning = s.reasoning === "" ? {} : { reasoning_content: s.reasoning };
  if (!isObject(last) || last.role !== "assistant")
    return [...messages, { role: "assistant", content: s.content, ...reasoning }];
  const prefill = typeof last.content === "string" ? last.content : undefined;
  let content: unknown;
  if (prefill !== undefined)
    content = echoed && s.content.startsWith(prefill) ? s.content : prefill + s.content;
  else if (Array.isArray(last.content))
    content =
      s.content === "" ? last.content : [...last.content, { type: "text", text: s.content }];
  else content = s.content;
  const priorReasoning = typeof last.reasoning_content === "string" ? last.reasoning_content : "";
  const merged: Json = { ...last, content };
  if (priorReasoning !== "" || s.reasoning !== "")
    merged.reasoning_content = priorReasoning + s.reasoning;
  return [...messages.slice(0, -1), merged];
}

/** OpenAI's usage object (llama-server adds `prompt_tokens_details`). */
export interface Usage {
  readonly prompt_tokens: number;
  readonly completion_tokens: number;
  readonly total_tokens: number;
}

/**
 * The usage of a migrated answer: completion tokens are those sent before the loss plus the
 * continuation's; prompt tokens are the continuation's prompt less the tokens it was given back as
 * its prefill (so, the original prompt as the engine counts it: re-tokenizing the sent text may
 * shift it by a token or two). From the engine's `usage`, else its `timings`; undefined when neither.
 */
export function combinedUsage(
  usage: { prompt_tokens?: unknown; completion_tokens?: unknown } | undefined,
  timings: EngineTimings | undefined,
  sentTokens: number,
): Usage | undefined {
  const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
  const completion = num(usage?.completion_tokens) ?? timings?.predicted_n;
  const promptAll =
    num(usage?.prompt_tokens) ??
    (timings?.prompt_n !== undefined ? (timings.cache_n ?? 0) + timings.prompt_n : undefined);
  if (completion === undefined && promptAll === undefined) return undefined;
  const completion_tokens = sentTokens + (completion ?? 0);
  const prompt_tokens = Math.max(0, (promptAll ?? 0) - sentTokens);
  return { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens };
}

/** How the continuation's events are made the rest of the first answer. */
export interface ContinuationContext {
  /** The completion id the client has (the command id). */
  readonly id: string;
  /** `created` and `model` of the events the client got (absent: the continuation's are kept). */
  readonly created: unknown;
  readonly model: unknown;
  /** The instance the stream was lost on (`x_ic.migrated_from` of the final event). */
  readonly migratedFrom: string;
  readonly sentTokens: number;
  /** The client asked for a usage event (`stream_options.include_usage`): that one is the last. */
  readonly includeUsage: boolean;
  /** The stream's KV cache moved with it (`x_ic.kv` of the final event): tokens restored, bytes. */
  readonly kv?: { readonly restored_tokens: number; readonly bytes: number };
}

const ROLE_ONLY_KEYS = new Set(["role", "content"]);

/** llama-server's first event of a stream: the assistant role and no text (the client has one). */
function isRoleOnly(ev: Json): boolean {
  const choices = Array.isArray(ev.choices) ? ev.choices : [];
  if (choices.length !== 1 || !isObject(choices[0])) return false;
  const c = choices[0];
  if (c.finish_reason !== null && c.finish_reason !== undefined) return false;
  const d = c.delta;
  if (!isObject(d) || typeof d.role !== "string") return false;
  return (
    Object.keys(d).every((k) => ROLE_ONLY_KEYS.has(k)) &&
    (d.content === null || d.content === undefined || d.content === "")
  );
}

/**
 * Rewrites the continuation's complete SSE events: its first role-only event is dropped; every event
 * gets the first answer's id, `created` and `model`; the usage event gets the combined usage; the
 * final event (the usage event when the client asked for one, else the one with a finish_reason)
 * gets `x_ic.migrated_from` (and `x_ic.kv` when the cache moved) beside any x_ic fields it has. Should [DONE] come without such an event,
 * a chunk with no choices carrying x_ic goes before it.
 */
export class ContinuationRewriter {
  private started = false;
  private marked = false;
  private usage: Usage | undefined;
  private timings: EngineTimings | undefined;

  constructor(private readonly o: ContinuationContext) {}

  rewrite(events: string): string {
    let out = "";
    for (const ev of events.split(/\r?\n\r?\n/)) {
      if (ev.length === 0) continue;
      out += this.event(ev);
    }
    return out;
  }

  /** The whole answer's usage and the continuation's timings (for the task report and metrics). */
  report(): { usage: Usage | undefined; timings: EngineTimings | undefined } {
    return {
      usage: this.usage ?? combinedUsage(undefined, this.timings, this.o.sentTokens),
      timings: this.timings,
    };
  }

  private event(ev: string): string {
    if (!ev.startsWith("data: ")) return `${ev}\n\n`;
    const data = ev.slice(6).trim();
    if (data === "[DONE]") return `${this.marked ? "" : this.closingEvent()}data: [DONE]\n\n`;
    let json: unknown;
    try {
      json = JSON.parse(data);
    } catch {
      return `${ev}\n\n`;
    }
    if (!isObject(json)) return `${ev}\n\n`;
    if (!this.started && isRoleOnly(json)) return "";
    this.started = true;
    const { id, created, model } = this.o;
    json.id = id;
    if (created !== undefined) json.created = created;
    if (model !== undefined) json.model = model;
    if (isObject(json.timings)) this.timings = json.timings as EngineTimings;
    const hasUsage = isObject(json.usage);
    if (hasUsage) {
      const combined = combinedUsage(json.usage as Json, undefined, this.o.sentTokens);
      this.usage = combined;
      const { prompt_tokens_details: _details, ...rest } = json.usage as Json;
      json.usage = { ...rest, ...combined };
    }
    const finishing =
      Array.isArray(json.choices) &&
      json.choices.some(
        (c) => isObject(c) && c.finish_reason !== null && c.finish_reason !== undefined,
      );
    if (this.o.includeUsage ? hasUsage : finishing) {
      json.x_ic = { ...(isObject(json.x_ic) ? json.x_ic : {}), ...this.mark() };
      this.marked = true;
    }
    return `data: ${JSON.stringify(json)}\n\n`;
  }

  /** What the final event's x_ic says of the migration. */
  private mark(): Json {
    const { migratedFrom, kv } = this.o;
    return kv ? { migrated_from: migratedFrom, kv } : { migrated_from: migratedFrom };
  }

  private closingEvent(): string {
    this.marked = true;
    const { id, created, model } = this.o;
    const ev: Json = { choices: [], id, object: "chat.completion.chunk" };
    if (created !== undefined) ev.created = created;
    if (model !== undefined) ev.model = model;
    ev.x_ic = this.mark();
    return `data: ${JSON.stringify(ev)}\n\n`;
  }
}

/** Whether a request opted in: its `x-ic-migrate` header (`1` on, `0` off), else the config. */
export function migrationWanted(header: string | undefined, configured: boolean): boolean {
  if (header === "1") return true;
  if (header === "0") return false;
  return configured;
}

/** Whether the client asked for a usage event (`stream_options.include_usage`). */
export function includesUsage(body: Json): boolean {
  return isObject(body.stream_options) && body.stream_options.include_usage === true;
}

/**
 * How a migration ended: `migrated` (the continuation's first event reached the client),
 * `no_instance` (no other ready instance off draining nodes, or the client had left),
 * `not_continuable` (a tool call or the finish had been streamed, or max_tokens was reached),
 * `failed` (the continuation failed before its first event, or the request's total bound had passed).
 */
export const MIGRATION_OUTCOMES = ["migrated", "no_instance", "not_continuable", "failed"] as const;
export type MigrationOutcome = (typeof MIGRATION_OUTCOMES)[number];

/** One migration, for metrics: its outcome and the time from the loss to that outcome. */
export interface MigrationReport {
  readonly model: string;
  readonly outcome: MigrationOutcome;
  readonly seconds: number;
}
