import { describe, expect, it } from "vitest";
import { PROMPT_PREFIX_CHARS, prefixKey } from "./prefix-key.ts";

const system = { role: "system", content: "You are a careful assistant. ".repeat(50) };
const turn1 = [system, { role: "user", content: "Plan a trip to Lisbon." }];
const turn3 = [
  ...turn1,
  { role: "assistant", content: "Day 1: Alfama..." },
  { role: "user", content: "Make day 2 cheaper." },
  { role: "assistant", content: "Day 2: ..." },
  { role: "user", content: "And day 3?" },
];

describe("prefixKey", () => {
  it("is the same for every turn of a conversation (its leading system and first user messages)", () => {
    expect(prefixKey({ model: "m", messages: turn3 })).toBe(
      prefixKey({ model: "m", messages: turn1 }),
    );
  });

  it("differs for another conversation with the same system prompt, another model, or another system prompt", () => {
    const k = prefixKey({ model: "m", messages: turn1 });
    expect(
      prefixKey({
        model: "m",
        messages: [system, { role: "user", content: "Plan a trip to Porto." }],
      }),
    ).not.toBe(k);
    expect(prefixKey({ model: "other", messages: turn1 })).not.toBe(k);
    expect(
      prefixKey({ model: "m", messages: [{ role: "system", content: "x" }, turn1[1]!] }),
    ).not.toBe(k);
  });

  it("takes structured content as it is (parts), and messages without a user one whole", () => {
    const parts = [{ role: "user", content: [{ type: "text", text: "hi" }] }];
    expect(prefixKey({ model: "m", messages: parts })).toBe(
      prefixKey({ model: "m", messages: [...parts, { role: "assistant", content: "hello" }] }),
    );
    expect(prefixKey({ model: "m", messages: [system] })).not.toBe(
      prefixKey({ model: "m", messages: turn1 }),
    );
  });

  it("keys a completion by its prompt's leading characters, and has none for nothing to share", () => {
    const long = "a".repeat(PROMPT_PREFIX_CHARS);
    expect(prefixKey({ model: "m", prompt: `${long}one` })).toBe(
      prefixKey({ model: "m", prompt: `${long}two` }),
    );
    expect(prefixKey({ model: "m", prompt: ["abc"] })).toBe(
      prefixKey({ model: "m", prompt: "abc" }),
    );
    expect(prefixKey({ model: "m", prompt: "abc" })).not.toBe(
      prefixKey({ model: "m", prompt: "abd" }),
    );
    expect(prefixKey({ model: "m" })).toBeUndefined();
    expect(prefixKey({ model: "m", messages: [] })).toBeUndefined();
    expect(prefixKey({ model: "m", prompt: "" })).toBeUndefined();
  });

  it("keys Anthropic messages by their system prompt and first user message, every turn alike", () => {
    const user = { role: "user", content: "Plan a trip to Lisbon." };
    const later = [
      user,
      { role: "assistant", content: "Day 1" },
      { role: "user", content: "more" },
    ];
    const k = prefixKey({ model: "m", system: "Be brief.", messages: [user] });
    expect(prefixKey({ model: "m", system: "Be brief.", messages: later })).toBe(k);
    expect(prefixKey({ model: "m", system: "Be long.", messages: [user] })).not.toBe(k);
    // Without a system prompt, the key is chat's for the same messages.
    expect(prefixKey({ model: "m", messages: [user] })).toBe(
      prefixKey({ model: "m", messages: [{ role: "user", content: "Plan a trip to Lisbon." }] }),
    );
  });

  it("keys a Responses request by its instructions and leading input, as a string or as items", () => {
    const items = [{ role: "user", content: "Plan a trip." }];
    const next = [
      ...items,
      { type: "function_call", name: "f", arguments: "{}" },
      { type: "function_call_output", output: "ok" },
    ];
    const k = prefixKey({ model: "m", instructions: "Be brief.", input: items });
    expect(prefixKey({ model: "m", instructions: "Be brief.", input: next })).toBe(k);
    expect(prefixKey({ model: "m", instructions: "Be long.", input: items })).not.toBe(k);
    const long = "a".repeat(PROMPT_PREFIX_CHARS);
    expect(prefixKey({ model: "m", input: `${long}one` })).toBe(
      prefixKey({ model: "m", input: `${long}two` }),
    );
    // Not the same as a completion with that prompt (another endpoint, another template).
    expect(prefixKey({ model: "m", input: "abc" })).not.toBe(
      prefixKey({ model: "m", prompt: "abc" }),
    );
    expect(prefixKey({ model: "m", input: "" })).toBeUndefined();
  });
});
