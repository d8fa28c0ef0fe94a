// Routing on the prompt caches (chat.prefix_routing "cache") through the real chat path, against two
// scripted engines that keep a prompt cache of their own: each reuses the longest prefix it has seen
// (by characters, as a byte-level vocabulary would) and reports it in `timings.cache_n`, as
// llama-server does, in a whole answer or in a stream's last chunk.
import type { IncomingMessage, ServerResponse } from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import { createGatewayApp } from "../app.ts";
import { PromptCacheMap } from "../prompt-cache.ts";
import { chainHashes, promptText } from "../prompt-blocks.ts";
import type { PromptBlocks } from "../prompt-blocks.ts";
import { closers, engine, INSTANCE, listen, MODEL, twoInstances } from "../testing/scripted.ts";

afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

/** An engine with an unbounded prompt cache: cache_n is the longest prefix of a prompt seen before. */
function caching() {
  const seen: string[] = [];
  return (_q: IncomingMessage, res: ServerResponse, raw: string) => {
    const body = JSON.parse(raw) as { model: string; messages: unknown[]; stream?: boolean };
    const text = promptText({ model: MODEL, messages: body.messages })!;
    let cached = 0;
    for (const s of seen) {
      let i = 0;
      while (i < s.length && i < text.length && s[i] === text[i]) i++;
      cached = Math.max(cached, i);
    }
    seen.push(text);
    const timings = { cache_n: cached, prompt_n: text.length - cached, predicted_n: 1 };
    if (!body.stream) {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ choices: [{ index: 0, message: { content: "ok" } }], timings }));
      return;
    }
    res.setHeader("content-type", "text/event-stream");
    res.write(`data: {"choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n`);
    res.end(
      `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"timings":${JSON.stringify(timings)}}\n\ndata: [DONE]\n\n`,
    );
  };
}

/**
 * An engine that holds prompts starting "Decode." after their first chunk and those starting
 * "Prefill." before any byte, until `later`; it answers the others at once.
 */
function streamsThenWaits(later: Promise<void>) {
  return async (_q: IncomingMessage, res: ServerResponse, raw: string) => {
    const body = JSON.parse(raw) as { messages: { content: string }[]; stream?: boolean };
    const content = body.messages[0]!.content;
    if (content.startsWith("Prefill.")) await later;
    if (!body.stream) {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ choices: [{ index: 0, message: { content: "ok" } }] }));
      return;
    }
    res.setHeader("content-type", "text/event-stream");
    res.write(`data: {"choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n`);
    if (content.startsWith("Decode.")) await later;
    res.end(
      `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n`,
    );
  };
}

async function setup(
  prefixRouting: "cache" | "hash",
  hold?: (raw: string) => Promise<void> | undefined,
) {
  const wrap = (h: ReturnType<typeof caching>) =>
    hold
      ? async (q: IncomingMessage, res: ServerResponse, raw: string) => {
          await hold(raw);
          h(q, res, raw);
        }
      : h;
  const a = await engine(wrap(caching()));
  const b = await engine(wrap(caching()));
  const promptCache = new PromptCacheMap();
  const base = await listen(
    createGatewayApp({
      cluster: twoInstances(a.url, b.url).view,
      log: silentLogger(),
      name: "t",
      chat: { prefix_routing: prefixRouting },
      promptCache,
    }),
  );
  const send = async (messages: unknown[], stream = false) => {
    const r = await fetch(`${base}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, messages, stream }),
    });
    const text = await r.text();
    expect(r.status, text).toBe(200);
    return r.headers.get("x-instance-id");
  };
  return { send, promptCache, engines: [a, b] };
}

/** The blocks the gateway makes of a one-message prompt of `content`. */
function promptBlocks(content: string): PromptBlocks {
  const text = promptText({ model: MODEL, messages: [{ role: "user", content }] })!;
  return { hashes: chainHashes(text), chars: text.length };
}

const words = "river stone lantern orchard harbor meadow signal copper".split(" ");
const filler = (seed: number, n: number) => {
  let s = "";
  for (let i = 0; s.length < n; i++) s += `${words[(seed * 5 + i * 3) % words.length]} `;
  return s.slice(0, n);
};

describe("prefix_routing cache", () => {
  it("the prompts of a group that shares a long system prompt go where that prompt is cached", async () => {
    const { send, promptCache, engines } = await setup("cache");
    const homes = new Map<number, Set<string | null>>();
    for (let p = 0; p < 4; p++)
      for (let g = 0; g < 4; g++) {
        const messages = [
          { role: "system", content: `Group ${g}. ${filler(g, 2000)}` },
          { role: "user", content: `Question ${p}: ${filler(100 + p * 4 + g, 200)}` },
        ];
        const home = homes.get(g) ?? new Set();
        home.add(await send(messages, p % 2 === 1));
        homes.set(g, home);
      }
    for (const [g, home] of homes) expect([...home], `group ${g}`).toHaveLength(1);
    // Both replicas serve: groups spread by the key's ranking before anything is cached.
    expect(new Set([...homes.values()].map((h) => [...h][0])).size).toBe(2);
    // Each group's system prompt was computed once; the map's predictions track the engines'.
    const acc = [...promptCache.accuracy().values()];
    const sum = (k: "requests" | "predictedTokens" | "cachedTokens" | "errorTokens") =>
      acc.reduce((n, a) => n + a[k], 0);
    expect(sum("requests")).toBe(16);
    expect(sum("cachedTokens")).toBeGreaterThan(12 * 2000);
    expect(sum("errorTokens")).toBeLessThan(0.25 * sum("cachedTokens"));
    // Each engine was asked its slot count once (GET /props), in the background.
    expect(engines.map((e) => e.props.asked)).toEqual([1, 1]);
    const ids = [...promptCache.accuracy().keys()];
    expect(ids.map((id) => promptCache.knowsSlots(id))).toEqual([true, true]);
  });

  it("a group's prompt sent while the first is still computed goes by load: the busy slot is not reusable", async () => {
    // The engine answers the first prompt only when told: its slot is busy meanwhile.
    let release!: () => void;
    const first = new Promise<void>((r) => (release = r));
    const { send } = await setup("cache", (raw) =>
      raw.includes("Question 0") ? first : undefined,
    );
    const system = { role: "system", content: `Group 1. ${filler(1, 2000)}` };
    const ask = (q: number) => [
      system,
      { role: "user", content: `Question ${q}: ${filler(q, 200)}` },
    ];
    const firstHome = send(ask(0));
    await new Promise((r) => setTimeout(r, 50));
    // Nothing reusable anywhere: the least loaded replica, not the first one's.
    const second = await send(ask(1));
    release();
    const home = await firstHome;
    expect(second).not.toBe(home);
  });

  it("a new prompt goes where the engine is decoding, not where it still computes a prompt: the prefill queued counts", async () => {
    // One engine streams the first tokens of A and then waits; the other has not begun to answer B
    // (its prompt is being computed). Each has one request in flight.
    let release!: () => void;
    const later = new Promise<void>((r) => (release = r));
    const a = await engine(streamsThenWaits(later));
    const b = await engine(streamsThenWaits(later));
    const base = await listen(
      createGatewayApp({
        cluster: twoInstances(a.url, b.url).view,
        log: silentLogger(),
        name: "t",
        chat: { prefix_routing: "cache" },
      }),
    );
    const send = (content: string, stream = false) =>
      fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content }], stream }),
      });
    const decoding = await send(`Decode. ${filler(1, 2000)}`, true);
    const computing = send(`Prefill. ${filler(2, 2000)}`);
    await new Promise((r) => setTimeout(r, 100));
    // Eight new prompts, nothing of them held anywhere, one at a time: by the key's ranking alone
    // about half would go to either.
    const homes = new Set<string | null>();
    for (let k = 0; k < 8; k++)
      homes.add((await send(`New ${k}. ${filler(10 + k, 1000)}`)).headers.get("x-instance-id"));
    release();
    const decodingHome = decoding.headers.get("x-instance-id");
    await decoding.text();
    const computingHome = (await computing).headers.get("x-instance-id");
    expect(computingHome).not.toBe(decodingHome);
    expect([...homes]).toEqual([decodingHome]);
  });

  it("a prompt shorter than a block goes to the fewest in flight, then the nearest and oldest, not to the roomiest", async () => {
    const { send, promptCache } = await setup("cache");
    // The oldest instance (i-1) holds two prompts, the other none: by room, i-2.
    for (const k of [1, 2])
      promptCache.record(INSTANCE, promptBlocks(`Long ${k}. ${filler(k, 600)}`));
    const homes = new Set<string | null>();
    for (let k = 0; k < 4; k++) homes.add(await send([{ role: "user", content: `Hi ${k}` }]));
    expect([...homes]).toEqual([INSTANCE]);
    // A longer prompt, nothing held: the roomiest.
    expect(await send([{ role: "user", content: `Long 3. ${filler(3, 600)}` }])).toBe("i-2");
  });

  it("each turn of a conversation goes to the replica holding the turn before, streams too", async () => {
    const { send } = await setup("cache");
    for (let c = 0; c < 6; c++) {
      const messages: { role: string; content: string }[] = [
        { role: "system", content: "You plan trips." },
        { role: "user", content: `Trip ${c}. ${filler(c, 800)}` },
      ];
      const used = new Set<string | null>();
      for (let t = 0; t < 4; t++) {
        used.add(await send(messages, t % 2 === 0));
        messages.push({ role: "assistant", content: "ok" }, { role: "user", content: `more ${t}` });
      }
      expect([...used], `conversation ${c}`).toHaveLength(1);
    }
  });
});
