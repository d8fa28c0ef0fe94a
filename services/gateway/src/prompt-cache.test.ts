import { describe, expect, it } from "vitest";
import { chainHashes } from "./prompt-blocks.ts";
import type { PromptNotices } from "@ic/protocol";
import type { PromptBlocks } from "./prompt-blocks.ts";
import { PromptCacheMap, START_ENTRIES } from "./prompt-cache.ts";
import { markPositions } from "./prompt-entries.ts";

/** Four characters per block here: a prompt of n blocks is n words of four letters. */
const B = 4;
const prompt = (text: string): PromptBlocks => ({
  hashes: chainHashes(text, B),
  chars: text.length,
});
const map = () => new PromptCacheMap({ blockChars: B });
/** The engine's answer for a byte-level vocabulary: one token per character. */
const exact = (p: PromptBlocks, cachedChars: number) => ({ cached: cachedChars, prompt: p.chars });

describe("PromptCacheMap: what an instance holds", () => {
  it.each([
    ["nothing recorded: nothing held", [], "aaaabbbb", 0],
    ["its own prompt, whole blocks", ["aaaabbbbcc"], "aaaabbbbcc", 8],
    ["a later turn: the earlier prompt", ["aaaabbbb"], "aaaabbbbccccdddd", 8],
    ["a shared system prompt, not the rest", ["aaaabbbbxxxx"], "aaaabbbbyyyy", 8],
    ["the longest of several", ["aaaa", "xxxx", "aaaabbbbcccc"], "aaaabbbbccccdddd", 12],
    [
      "a shorter prompt of the same beginning took its slot",
      ["aaaabbbbcccc", "aaaabbbb"],
      "aaaabbbbcccc",
      8,
    ],
    ["another prompt: nothing", ["zzzzyyyy"], "aaaabbbb", 0],
  ])("%s", (_, recorded, asked, held) => {
    const m = map();
    for (const r of recorded) m.record("i-1", prompt(r));
    expect(m.reuse("i-1", prompt(asked))).toBe(held);
    expect(m.reuse("i-2", prompt(asked))).toBe(0);
  });

  it.each([
    ["nothing held: all of it", [], "aaaabbbbcc", 10],
    ["a later turn: its new characters", ["aaaabbbb"], "aaaabbbbccccdd", 6],
    ["a shared system prompt: the rest", ["aaaabbbbxxxx"], "aaaabbbbyyyy", 4],
  ])("the prefill it predicts is what it does not hold: %s", (_, recorded, asked, prefill) => {
    const m = map();
    for (const r of recorded) m.record("i-1", prompt(r));
    expect(m.record("i-1", prompt(asked)).prefillChars).toBe(prefill);
  });

  it("a turn replaces the prompt it extends, as the engine's slot does", () => {
    const m = map();
    m.record("i-1", prompt("aaaabbbb"));
    m.record("i-1", prompt("aaaabbbbcccc"));
    expect(m.accuracy().get("i-1")!.entries).toBe(1);
    expect(m.reuse("i-1", prompt("aaaabbbbccccdddd"))).toBe(12);
    // Once it is dropped, none of its blocks is left behind.
    for (const n of ["eeee", "ffff", "gggg", "hhhh"]) m.record("i-1", prompt(n.repeat(2)));
    expect(m.reuse("i-1", prompt("aaaabbbbcccc"))).toBe(0);
  });

  it("a prompt takes the slot of the one it begins most alike (over a tenth of it), as llama-server does", () => {
    const m = map();
    // Two prompts of one system prompt (aaaabbbb) and one of another: the second of the group
    // overwrites the first's slot, so the instance holds two prompts, not three.
    m.record("i-1", prompt("aaaabbbbxxxx"));
    m.record("i-1", prompt("zzzzyyyy"));
    m.record("i-1", prompt("aaaabbbbwwww"));
    expect(m.accuracy().get("i-1")!.entries).toBe(2);
    expect(m.reuse("i-1", prompt("aaaabbbbxxxx"))).toBe(8);
    expect(m.reuse("i-1", prompt("aaaabbbbwwww"))).toBe(12);
    // Sharing one block of twenty (under a tenth): a slot of its own.
    m.record("i-1", prompt(`aaaa${"q".repeat(76)}`));
    expect(m.accuracy().get("i-1")!.entries).toBe(3);
  });

  it("what taking a prompt would drop: nothing while there is room or a slot begins alike, else the least recent", () => {
    const m = map();
    const names = ["aaaa", "bbbb", "cccc"];
    for (const n of names) m.record("i-1", prompt(n.repeat(3)));
    expect(m.displaced("i-1", prompt("dddd".repeat(2)))).toBe(0); // three of four: room
    expect(m.displaced("i-2", prompt("dddd".repeat(2)))).toBe(0); // nothing known there
    m.record("i-1", prompt("dddd".repeat(5)));
    expect(m.displaced("i-1", prompt("eeee".repeat(2)))).toBe(12); // full: aaaa x3 goes
    expect(m.displaced("i-1", prompt(`${"dddd".repeat(2)}ffff`))).toBe(0); // dddd's slot
    expect(m.displaced("i-1", prompt("bbbb".repeat(4)))).toBe(0); // extends bbbb x3
    expect(m.displaced("i-1", prompt("ee"))).toBe(0); // under a block: nothing recorded
    expect(m.room("i-1")).toBe(0);
    // Prompts recorded elsewhere since, more than every cache holds: the idle ones here are stale,
    // so they leave room and dropping them costs nothing.
    for (const n of ["kkkk", "llll", "mmmm", "nnnn", "oooo", "pppp", "qqqq", "rrrr", "ssss"])
      m.record("i-2", prompt(n.repeat(2)));
    expect(m.room("i-1")).toBe(START_ENTRIES);
    expect(m.displaced("i-1", prompt("eeee".repeat(2)))).toBe(0);
  });

  it("a prompt whose request is in flight is not reusable, nor is its slot taken, until it ends", () => {
    const m = map();
    const first = prompt("aaaabbbbxxxx");
    const release = m.inFlight(m.record("i-1", first));
    // A second prompt of the group while the first is processed: the engine computes it in another
    // slot, so the map predicts nothing and keeps both.
    const second = prompt("aaaabbbbwwww");
    expect(m.reuse("i-1", second)).toBe(0);
    expect(m.record("i-1", second)).toMatchObject({ liveBlocks: 0 });
    expect(m.accuracy().get("i-1")!.entries).toBe(2);
    expect(m.room("i-1")).toBe(START_ENTRIES - 2);
    release();
    release(); // once
    expect(m.reuse("i-1", first)).toBe(12);
    expect(m.accuracy().get("i-1")!.entries).toBe(2);
    // A busy slot is not dropped to make room: the idle ones go first.
    const busy = m.inFlight(m.record("i-1", prompt("ccccdddd")));
    for (const n of ["eeee", "ffff", "gggg"]) m.record("i-1", prompt(n.repeat(2)));
    busy();
    expect(m.reuse("i-1", prompt("ccccdddd"))).toBe(8);
    expect(m.room("i-2")).toBe(START_ENTRIES);
  });

  it(`keeps the ${START_ENTRIES} most recent prompts at first, least recent out first`, () => {
    const m = map();
    const names = ["aaaa", "bbbb", "cccc", "dddd", "eeee"];
    for (const n of names) m.record("i-1", prompt(n.repeat(3)));
    expect(m.reuse("i-1", prompt("aaaa".repeat(3)))).toBe(0);
    for (const n of names.slice(1)) expect(m.reuse("i-1", prompt(n.repeat(3)))).toBe(12);
  });
});

describe("PromptCacheMap: what the other gateways announce", () => {
  it.each([
    [1, []],
    [2, [1]],
    [4, [1, 2, 3]],
    [13, [1, 2, 3, 4, 6, 8, 12]],
    [17, [1, 2, 3, 4, 6, 8, 12, 16]],
  ])("a prompt of %i blocks is marked at %j", (blocks, want) => {
    expect(markPositions(blocks)).toEqual(want);
  });

  it("a notice's marks stay few however long the prompt (the bus schema's 64 at most)", () => {
    expect(markPositions(1_000_000).length).toBeLessThanOrEqual(40);
  });

  it("a prompt sent by another gateway: a later turn of it matches it whole, then replaces it", async () => {
    const sent: PromptNotices[] = [];
    const a = new PromptCacheMap({ blockChars: B, publish: (n) => sent.push(n) });
    const b = map();
    const turn1 = prompt("aaaabbbbcccc");
    a.record("i-1", turn1);
    a.record("i-2", prompt("xxxxyyyy"));
    expect(sent).toEqual([]); // once the event loop's turn is over
    await new Promise((r) => setImmediate(r));
    expect(sent).toHaveLength(1);
    // Its last block, and its marks: the hashes of its first block and first two.
    expect(sent[0]!.prompts[0]).toEqual({
      instance_id: "i-1",
      blocks: 3,
      last: turn1.hashes[2],
      marks: [turn1.hashes[0], turn1.hashes[1]],
    });
    for (const n of sent) b.receive(n);
    const turn2 = prompt("aaaabbbbccccdddd");
    expect(b.reuse("i-1", turn2)).toBe(12);
    expect(b.reuse("i-1", prompt("aaaabbbbxxxx"))).toBe(8); // its marks
    expect(b.reuse("i-1", prompt("aaaaxxxxcccc"))).toBe(4);
    b.record("i-1", turn2);
    expect(b.accuracy().get("i-1")!.entries).toBe(1);
  });

  it("a notice names the prompt whose slot it took: the receiver drops it too", async () => {
    const sent: PromptNotices[] = [];
    const a = new PromptCacheMap({ blockChars: B, publish: (n) => sent.push(n) });
    const fromB: PromptNotices[] = [];
    const b = new PromptCacheMap({ blockChars: B, publish: (n) => fromB.push(n) });
    // b sent a group's first prompt, a its second (of the same system prompt, aaaabbbb).
    const first = prompt("aaaabbbbxxxx");
    b.record("i-1", first);
    await new Promise((r) => setImmediate(r));
    for (const n of fromB) a.receive(n);
    const second = prompt("aaaabbbbwwww");
    a.record("i-1", second);
    expect(a.accuracy().get("i-1")!.entries).toBe(1);
    await new Promise((r) => setImmediate(r));
    expect(sent[0]!.prompts[0]).toMatchObject({
      instance_id: "i-1",
      blocks: 3,
      last: second.hashes[2],
      replaces: { blocks: 3, last: first.hashes[2] },
    });
    for (const n of sent) b.receive(n);
    expect(b.accuracy().get("i-1")!.entries).toBe(1);
    expect(b.reuse("i-1", first)).toBe(8); // the system prompt, in the second's slot
    expect(b.reuse("i-1", second)).toBe(12);
  });

  it("a prompt shorter than a block is not announced", () => {
    const sent: unknown[] = [];
    new PromptCacheMap({ blockChars: B, publish: (n) => sent.push(n) }).record(
      "i-1",
      prompt("abc"),
    );
    expect(sent).toEqual([]);
  });
});

describe("PromptCacheMap: warm conversations that move", () => {
  it("lists the prompts that name their slot, newest first; a moved one is held and told on its new instance", async () => {
    const sent: PromptNotices[] = [];
    const m = new PromptCacheMap({ blockChars: B, publish: (n) => sent.push(n) });
    m.record("i-1", prompt("aaaabbbb"), 11);
    m.record("i-1", prompt("ccccdddd"));
    m.record("i-1", prompt("eeeeffff"), 13);
    // Another gateway's prompt, with its seed.
    m.receive({ prompts: [{ instance_id: "i-1" as never, blocks: 2, last: 99, seed: 17 }] });
    const warm = m.warmest("i-1");
    expect(warm.map((w) => w.seed)).toEqual([17, 13, 11]);
    expect(m.warmest("i-2")).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(sent.flatMap((n) => n.prompts).map((p) => p.seed)).toEqual([11, undefined, 13]);

    m.moved("i-2", warm[2]!);
    expect(m.reuse("i-2", prompt("aaaabbbbcccc"))).toBe(8);
    await new Promise((r) => setImmediate(r));
    expect(sent.at(-1)!.prompts).toEqual([
      {
        instance_id: "i-2",
        blocks: 2,
        last: warm[2]!.last,
        seed: 11,
        marks: [warm[2]!.indexed[0]],
      },
    ]);
    // Moved twice to the same instance: held once.
    m.moved("i-2", warm[2]!);
    expect(m.accuracy().get("i-2")!.entries).toBe(1);
  });
});

describe("PromptCacheMap: the engine's counts correct it", () => {
  it("learns characters per token, so predictions come in tokens", () => {
    const m = map();
    const p = prompt("aaaabbbbccccdddd");
    for (let i = 0; i < 20; i++) m.settle(m.record("i-1", p), exact(p, 16));
    const next = m.record("i-1", p);
    expect(next.predictedTokens).toBeGreaterThanOrEqual(15);
    expect(next.predictedTokens).toBeLessThanOrEqual(17);
  });

  it("a prediction the engine refutes: it keeps one prompt fewer (never under one)", () => {
    const m = map();
    const p = prompt("aaaabbbbcccc");
    m.record("i-1", p);
    for (let i = 0; i < 10; i++) m.settle(m.record("i-1", p), exact(p, 0));
    expect(m.accuracy().get("i-1")!.capacity).toBe(1);
  });

  it.each([
    // slots the engine said, capacity after 10 refuted predictions
    [2, 2],
    [6, 6],
    [1, 1],
  ])(
    "an engine of %i slots keeps at least that many prompts, whatever the refutations (capacity %i)",
    (slots, capacity) => {
      const m = map();
      const p = prompt("aaaabbbbcccc");
      m.record("i-1", p);
      expect(m.knowsSlots("i-1")).toBe(false);
      m.slots("i-1", slots);
      expect(m.knowsSlots("i-1")).toBe(true);
      expect(m.accuracy().get("i-1")!.capacity).toBe(Math.max(START_ENTRIES, slots));
      for (let i = 0; i < 10; i++) m.settle(m.record("i-1", p), exact(p, 0));
      expect(m.accuracy().get("i-1")!.capacity).toBe(capacity);
    },
  );

  it("the engine's slots hold the map's prompts: a group's prompt is still predicted after refutations elsewhere", () => {
    const m = map();
    m.slots("i-1", 4);
    const groups = ["aaaa", "bbbb", "cccc", "dddd"].map((g) => prompt(g.repeat(4)));
    for (const g of groups) m.record("i-1", g);
    // Two refuted predictions (the engine's slot choice differed): the capacity stays 4 ...
    for (let i = 0; i < 2; i++) m.settle(m.record("i-1", groups[3]!), exact(groups[3]!, 0));
    // ... so the first group's prompt is still held.
    expect(m.reuse("i-1", groups[0]!)).toBe(16);
  });

  it("a prompt the map dropped but the engine still held: it keeps one more", () => {
    const m = map();
    const first = prompt("aaaa".repeat(3));
    m.record("i-1", first);
    for (const n of ["bbbb", "cccc", "dddd", "eeee"]) m.record("i-1", prompt(n.repeat(3)));
    const p = m.record("i-1", first);
    expect(p).toMatchObject({ liveBlocks: 0, ghostBlocks: 3 });
    m.settle(p, exact(first, 12));
    expect(m.accuracy().get("i-1")!.capacity).toBe(START_ENTRIES + 1);
  });

  it("an exact prediction changes nothing; the counts add up per instance", () => {
    const m = map();
    const a = prompt("aaaabbbb");
    const b = prompt("aaaabbbbcccc");
    m.settle(m.record("i-1", a), { cached: 0, prompt: 8 });
    m.settle(m.record("i-1", b), { cached: 8, prompt: 12 });
    expect(m.accuracy().get("i-1")).toMatchObject({
      requests: 2,
      cachedTokens: 8,
      promptTokens: 20,
      capacity: START_ENTRIES,
    });
    const acc = m.accuracy().get("i-1")!;
    expect(acc.errorTokens).toBe(Math.abs(acc.predictedTokens - 8));
  });

  it("an answer without prompt tokens, or for an instance forgotten, is ignored", () => {
    const m = map();
    const p = m.record("i-1", prompt("aaaabbbb"));
    m.settle(p, { cached: 0, prompt: 0 });
    expect(m.accuracy().get("i-1")!.requests).toBe(0);
    m.retain(new Set(["i-2"]));
    expect(m.size).toBe(0);
    m.settle(p, exact(prompt("aaaabbbb"), 8));
    expect(m.accuracy().size).toBe(0);
  });
});
