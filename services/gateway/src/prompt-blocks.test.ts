import { describe, expect, it } from "vitest";
import { BLOCK_CHARS, chainHashes, promptBlocks, promptText } from "./prompt-blocks.ts";

const system = { role: "system", content: "You plan trips. ".repeat(40) };
const turn1 = [system, { role: "user", content: `Lisbon in May. ${"Sights. ".repeat(40)}` }];
const turn2 = [
  ...turn1,
  { role: "assistant", content: "Day 1: Alfama." },
  { role: "user", content: "Cheaper?" },
];

describe("chainHashes", () => {
  it("hashes whole blocks only, each covering everything before it", () => {
    expect(chainHashes("abc", 4)).toEqual([]);
    expect(chainHashes("abcdefgh", 4)).toHaveLength(2);
    expect(chainHashes("abcdefghi", 4)).toEqual(chainHashes("abcdefgh", 4));
    // The same second block after a different first one hashes differently.
    expect(chainHashes("xxxxefgh", 4)[1]).not.toBe(chainHashes("abcdefgh", 4)[1]);
    for (const h of chainHashes("some text of a few blocks", 4))
      expect(Number.isSafeInteger(h) && h >= 0).toBe(true);
  });

  it("two texts share exactly the hashes of their common whole blocks", () => {
    const a = chainHashes("abcdefghijkl", 4);
    const b = chainHashes("abcdefghXjkl", 4);
    expect(b.slice(0, 2)).toEqual(a.slice(0, 2));
    expect(b[2]).not.toBe(a[2]);
  });
});

describe("promptBlocks", () => {
  it.each([
    [
      "a later turn of a chat begins with the earlier one",
      { model: "m", messages: turn1 },
      { model: "m", messages: turn2 },
    ],
    [
      "an Anthropic body (system beside the messages)",
      { model: "m", system: "S".repeat(300), messages: turn1.slice(1) },
      { model: "m", system: "S".repeat(300), messages: turn2.slice(1) },
    ],
    [
      "a Responses body's input items",
      { model: "m", instructions: "I".repeat(300), input: turn1.slice(1) },
      { model: "m", instructions: "I".repeat(300), input: turn2.slice(1) },
    ],
    [
      "a completion's prompt grown at its end",
      { model: "m", prompt: "p".repeat(400) },
      { model: "m", prompt: `${"p".repeat(400)} more` },
    ],
  ])("%s", (_, earlier, later) => {
    const a = promptBlocks(earlier)!;
    const b = promptBlocks(later)!;
    expect(a.hashes.length).toBeGreaterThan(1);
    expect(b.hashes.slice(0, a.hashes.length)).toEqual(a.hashes);
    expect(b.chars).toBeGreaterThan(a.chars);
  });

  it("another model, or other tools, share nothing; a body with no prompt has none", () => {
    const a = promptBlocks({ model: "m", messages: turn1 })!;
    expect(promptBlocks({ model: "n", messages: turn1 })!.hashes[0]).not.toBe(a.hashes[0]);
    const tools = [{ type: "function", function: { name: "f" } }];
    expect(promptBlocks({ model: "m", tools, messages: turn1 })!.hashes[0]).not.toBe(a.hashes[0]);
    expect(promptBlocks({ model: "m" })).toBeUndefined();
    expect(promptBlocks({ model: "m", messages: [] })).toBeUndefined();
  });

  it("two conversations with one system prompt share its blocks, not the rest", () => {
    const a = promptBlocks({ model: "m", messages: turn1 })!;
    const b = promptBlocks({
      model: "m",
      messages: [system, { role: "user", content: `Porto. ${"Sights. ".repeat(40)}` }],
    })!;
    const shared = a.hashes.findIndex((h, i) => b.hashes[i] !== h);
    expect(shared * BLOCK_CHARS).toBeGreaterThan(system.content.length - BLOCK_CHARS);
    expect(shared * BLOCK_CHARS).toBeLessThanOrEqual(
      promptText({ model: "m", messages: turn1 })!.indexOf("Lisbon"),
    );
  });
});
