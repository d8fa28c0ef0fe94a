// Stream migration's pure parts by tables: what the client got of a stream, the continuation request
// built from it, the combined usage, and the continuation's events rewritten into the same answer.
import { describe, expect, it } from "vitest";
import {
  combinedUsage,
  ContinuationRewriter,
  continuationRequest,
  eventPayloads,
  includesUsage,
  migrationWanted,
  Transcript,
} from "./migration.ts";
import type { StreamSoFar } from "./migration.ts";

const ev = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;
const delta = (d: Record<string, unknown>, finish: string | null = null) =>
  ev({
    choices: [{ index: 0, delta: d, finish_reason: finish }],
    created: 111,
    id: "chatcmpl-ours",
    model: "tiny.gguf",
    object: "chat.completion.chunk",
  });

function sofar(over: Partial<StreamSoFar> = {}): StreamSoFar {
  return {
    created: 111,
    model: "tiny.gguf",
    content: "Hello wor",
    reasoning: "",
    tokens: 3,
    toolCalls: false,
    finished: false,
    ...over,
  };
}

describe("Transcript: what the client got", () => {
  it.each([
    {
      what: "role event, then content: one token an event with text",
      events: [
        delta({ role: "assistant", content: null }),
        delta({ content: "He" }),
        delta({ content: "llo" }),
      ],
      expected: { content: "Hello", reasoning: "", tokens: 2, toolCalls: false, finished: false },
    },
    {
      what: "reasoning and content both count",
      events: [delta({ reasoning_content: "think" }), delta({ content: "ok" })],
      expected: { content: "ok", reasoning: "think", tokens: 2, toolCalls: false, finished: false },
    },
    {
      what: "a tool call is seen",
      events: [delta({ tool_calls: [{ index: 0, function: { name: "f" } }] })],
      expected: { content: "", reasoning: "", tokens: 0, toolCalls: true, finished: false },
    },
    {
      what: "a finish_reason is seen",
      events: [delta({ content: "x" }), delta({}, "stop")],
      expected: { content: "x", reasoning: "", tokens: 1, toolCalls: false, finished: true },
    },
    {
      what: "several events in one buffer, [DONE] and comments skipped",
      events: [
        delta({ content: "a" }) + ": ping\n\n" + delta({ content: "b" }) + "data: [DONE]\n\n",
      ],
      expected: { content: "ab", reasoning: "", tokens: 2, toolCalls: false, finished: false },
    },
  ])("$what", ({ events, expected }) => {
    const t = new Transcript();
    for (const e of events) t.push(Buffer.from(e));
    expect(t.sofar).toMatchObject({ ...expected, created: 111, model: "tiny.gguf" });
  });

  it("eventPayloads reads only data lines with JSON objects", () => {
    expect(eventPayloads('data: {"a":1}\n\ndata: nope\n\n: c\n\ndata: [DONE]\n\n')).toEqual([
      { a: 1 },
    ]);
  });
});

describe("continuationRequest", () => {
  const base = {
    model: "org/tiny",
    messages: [{ role: "user", content: "hi" }],
    max_tokens: 10,
    stream: true,
    temperature: 0,
  };

  it("appends the generated text as an assistant message to continue, caps reduced", () => {
    const plan = continuationRequest(base, sofar());
    expect(plan).toEqual({
      ok: true,
      maxTokens: 7,
      body: {
        ...base,
        max_tokens: 7,
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: "Hello wor" },
        ],
        continue_final_message: true,
        add_generation_prompt: false,
      },
    });
    // The original body is left as it was.
    expect(base.messages).toHaveLength(1);
  });

  it.each([
    {
      what: "max_completion_tokens and n_predict shrink too",
      body: { ...base, max_tokens: undefined, max_completion_tokens: 8, n_predict: 5 },
      s: sofar({ tokens: 2 }),
      expected: { max_completion_tokens: 6, n_predict: 3 },
      maxTokens: 3,
    },
    {
      what: "reasoning goes in reasoning_content",
      body: base,
      s: sofar({ reasoning: "hmm", content: "" }),
      expected: {
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: "", reasoning_content: "hmm" },
        ],
      },
      maxTokens: 7,
    },
    {
      what: "the client's own prefill with continue_final_message is extended (no echo)",
      body: {
        ...base,
        continue_final_message: true,
        add_generation_prompt: false,
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: "Sure: " },
        ],
      },
      s: sofar({ content: "one two" }),
      expected: {
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: "Sure: one two" },
        ],
      },
      maxTokens: 7,
    },
    {
      what: "the client's own prefill without it: llama-server echoed it, so it is not doubled",
      body: {
        ...base,
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: "Sure: " },
        ],
      },
      s: sofar({ content: "Sure: one two" }),
      expected: {
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: "Sure: one two" },
        ],
        continue_final_message: true,
        add_generation_prompt: false,
      },
      maxTokens: 7,
    },
    {
      what: "a prefill in parts gets a text part",
      body: {
        ...base,
        continue_final_message: true,
        messages: [{ role: "assistant", content: [{ type: "text", text: "A" }] }],
      },
      s: sofar({ content: "B" }),
      expected: {
        messages: [
          {
            role: "assistant",
            content: [
              { type: "text", text: "A" },
              { type: "text", text: "B" },
            ],
          },
        ],
      },
      maxTokens: 7,
    },
  ])("$what", ({ body, s, expected, maxTokens }) => {
    const plan = continuationRequest(body, s);
    expect(plan.ok).toBe(true);
    if (!plan.ok) return;
    expect(plan.body).toMatchObject(expected);
    expect(plan.maxTokens).toBe(maxTokens);
  });

  it("a text response_format does not constrain the output", () => {
    expect(continuationRequest({ ...base, response_format: { type: "text" } }, sofar()).ok).toBe(
      true,
    );
  });

  it("nothing generated yet (only the role event was sent): the original request as it was", () => {
    const plan = continuationRequest(base, sofar({ content: "", tokens: 0 }));
    expect(plan).toEqual({ ok: true, body: base, maxTokens: 10 });
  });

  it.each([
    { what: "a tool call was streamed", s: sofar({ toolCalls: true }), why: /tool call/ },
    { what: "the finish was streamed", s: sofar({ finished: true }), why: /finished/ },
    { what: "max_tokens was reached", s: sofar({ tokens: 10 }), why: /max_tokens \(10\)/ },
    {
      what: "a response_format constrains it",
      s: sofar(),
      body: { ...base, response_format: { type: "json_object" } },
      why: /grammar or response_format/,
    },
    {
      what: "a grammar constrains it",
      s: sofar(),
      body: { ...base, grammar: "root ::= [a-z]+" },
      why: /grammar or response_format/,
    },
  ])("not continued when $what", ({ s, why, body }) => {
    const plan = continuationRequest(body ?? base, s);
    expect(plan.ok).toBe(false);
    if (!plan.ok) expect(plan.why).toMatch(why);
  });
});

describe("combinedUsage", () => {
  it.each([
    {
      what: "from usage: completion adds, prompt loses the prefill",
      usage: { prompt_tokens: 24, completion_tokens: 3 },
      timings: undefined,
      sent: 3,
      expected: { prompt_tokens: 21, completion_tokens: 6, total_tokens: 27 },
    },
    {
      what: "from timings when there is no usage (cache_n + prompt_n is the prompt)",
      usage: undefined,
      timings: { cache_n: 20, prompt_n: 4, predicted_n: 5 },
      sent: 3,
      expected: { prompt_tokens: 21, completion_tokens: 8, total_tokens: 29 },
    },
    {
      what: "the prompt never goes below 0",
      usage: { prompt_tokens: 1, completion_tokens: 0 },
      timings: undefined,
      sent: 4,
      expected: { prompt_tokens: 0, completion_tokens: 4, total_tokens: 4 },
    },
    { what: "neither", usage: undefined, timings: undefined, sent: 4, expected: undefined },
  ])("$what", ({ usage, timings, sent, expected }) => {
    expect(combinedUsage(usage, timings, sent)).toEqual(expected);
  });
});

describe("ContinuationRewriter", () => {
  const ctx = {
    id: "chatcmpl-ours",
    created: 111,
    model: "tiny.gguf",
    migratedFrom: "i-1",
    sentTokens: 3,
  };
  const theirs = (o: Record<string, unknown>) =>
    ev({ id: "chatcmpl-theirs", created: 222, model: "other.gguf", ...o });
  const parse = (text: string) =>
    text
      .split("\n\n")
      .filter((e) => e.length > 0)
      .map((e) => (e === "data: [DONE]" ? e : (JSON.parse(e.slice(6)) as Record<string, unknown>)));

  it("drops the role event, rewrites id/created/model, marks the finish event (no usage asked)", () => {
    const r = new ContinuationRewriter({ ...ctx, includeUsage: false });
    const out =
      r.rewrite(theirs({ choices: [{ index: 0, delta: { role: "assistant", content: null } }] })) +
      r.rewrite(theirs({ choices: [{ index: 0, delta: { content: "ld" } }] })) +
      r.rewrite(
        theirs({
          choices: [{ index: 0, delta: {}, finish_reason: "length" }],
          timings: { cache_n: 20, prompt_n: 4, predicted_n: 2 },
          x_ic: { other: 1 },
        }) + "data: [DONE]\n\n",
      );
    const evs = parse(out);
    expect(evs).toHaveLength(3);
    for (const e of evs.slice(0, 2))
      expect(e).toMatchObject({ id: "chatcmpl-ours", created: 111, model: "tiny.gguf" });
    expect(evs[1]).toMatchObject({ x_ic: { other: 1, migrated_from: "i-1" } });
    expect(evs[0]).not.toHaveProperty("x_ic");
    expect(evs[2]).toBe("data: [DONE]");
    expect(r.report()).toEqual({
      usage: { prompt_tokens: 21, completion_tokens: 5, total_tokens: 26 },
      timings: { cache_n: 20, prompt_n: 4, predicted_n: 2 },
    });
  });

  it("with usage asked, the usage event is the final one and carries the combined usage", () => {
    const r = new ContinuationRewriter({ ...ctx, includeUsage: true });
    const evs = parse(
      r.rewrite(
        theirs({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }) +
          theirs({
            choices: [],
            usage: {
              prompt_tokens: 24,
              completion_tokens: 2,
              total_tokens: 26,
              prompt_tokens_details: { cached_tokens: 23 },
            },
          }) +
          "data: [DONE]\n\n",
      ),
    );
    expect(evs[0]).not.toHaveProperty("x_ic");
    expect(evs[1]).toMatchObject({
      id: "chatcmpl-ours",
      usage: { prompt_tokens: 21, completion_tokens: 5, total_tokens: 26 },
      x_ic: { migrated_from: "i-1" },
    });
    expect(evs[1]!).not.toHaveProperty("usage.prompt_tokens_details");
  });

  it("[DONE] with no final event marked: a chunk without choices carries x_ic before it", () => {
    const r = new ContinuationRewriter({ ...ctx, includeUsage: false });
    const evs = parse(
      r.rewrite(theirs({ choices: [{ index: 0, delta: { content: "x" } }] })) +
        r.rewrite("data: [DONE]\n\n"),
    );
    expect(evs).toHaveLength(3);
    expect(evs[1]).toEqual({
      choices: [],
      id: "chatcmpl-ours",
      object: "chat.completion.chunk",
      created: 111,
      model: "tiny.gguf",
      x_ic: { migrated_from: "i-1" },
    });
  });

  it("a cache that moved with the stream is named in the final event's x_ic, and in the closing chunk", () => {
    const kv = { restored_tokens: 1688, bytes: 5_212_736 };
    const r = new ContinuationRewriter({ ...ctx, includeUsage: false, kv });
    const [fin] = parse(
      r.rewrite(theirs({ choices: [{ index: 0, delta: {}, finish_reason: "length" }] })),
    );
    expect(fin).toMatchObject({ x_ic: { migrated_from: "i-1", kv } });
    const bare = new ContinuationRewriter({ ...ctx, includeUsage: false, kv });
    const evs = parse(bare.rewrite("data: [DONE]\n\n"));
    expect(evs[0]).toMatchObject({ choices: [], x_ic: { migrated_from: "i-1", kv } });
  });

  it("comments and what is not JSON pass unchanged; the role event is dropped only at the start", () => {
    const r = new ContinuationRewriter({ ...ctx, includeUsage: false });
    expect(r.rewrite(": ping\n\n")).toBe(": ping\n\n");
    expect(r.rewrite("data: nope\n\n")).toBe("data: nope\n\n");
    r.rewrite(theirs({ choices: [{ index: 0, delta: { content: "x" } }] }));
    const role = theirs({ choices: [{ index: 0, delta: { role: "assistant", content: null } }] });
    expect(parse(r.rewrite(role))).toHaveLength(1);
  });
});

describe("opting in", () => {
  it.each([
    [undefined, false, false],
    [undefined, true, true],
    ["1", false, true],
    ["0", true, false],
    ["yes", false, false],
  ])("header %s with config %s: %s", (header, configured, expected) => {
    expect(migrationWanted(header, configured)).toBe(expected);
  });

  it("includesUsage reads stream_options.include_usage", () => {
    expect(includesUsage({ stream_options: { include_usage: true } })).toBe(true);
    expect(includesUsage({ stream_options: {} })).toBe(false);
    expect(includesUsage({})).toBe(false);
  });
});
