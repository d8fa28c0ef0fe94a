import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, describe, expect, it } from "vitest";
import { EngineSlots, RETRY_MS } from "./engine-slots.ts";
import { PromptCacheMap } from "./prompt-cache.ts";

/** An engine's /props: `answer` decides status and body; every request is counted, with its headers. */
async function engine(answer: () => [number, unknown]) {
  const seen: { url: string; auth: string | undefined }[] = [];
  const server = createServer((req, res) => {
    seen.push({ url: req.url ?? "", auth: req.headers.authorization });
    const [status, body] = answer();
    res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, seen, close: () => server.close() };
}

const settle = () => new Promise((r) => setTimeout(r, 100));

describe("EngineSlots: each engine's slot count, asked once, in the background", () => {
  const servers: { close(): void }[] = [];
  afterAll(() => servers.forEach((s) => s.close()));

  it("takes llama-server's total_slots from /props, with the engine's key, and asks no more", async () => {
    const e = await engine(() => [200, { total_slots: 6, model_alias: "m" }]);
    servers.push(e);
    const cache = new PromptCacheMap();
    const slots = new EngineSlots({
      cache,
      headers: () => ({ authorization: "Bearer k" }),
      connectTimeoutMs: 1000,
    });
    slots.ask("i-1", e.url);
    await settle();
    expect(cache.knowsSlots("i-1")).toBe(true);
    expect(cache.accuracy().get("i-1")!.capacity).toBe(6);
    slots.ask("i-1", e.url);
    await settle();
    expect(e.seen).toEqual([{ url: "/props", auth: "Bearer k" }]);
  });

  it.each([
    ["no /props (a 404)", 404, { error: "not found" }],
    ["a body without total_slots", 200, { model_alias: "m" }],
    ["a slot count that is no count", 200, { total_slots: 0 }],
  ])("%s: no floor, and asked again only after RETRY_MS", async (_, status, body) => {
    const e = await engine(() => [status, body]);
    servers.push(e);
    const cache = new PromptCacheMap();
    let now = 1_000;
    const slots = new EngineSlots({ cache, connectTimeoutMs: 1000, now: () => now });
    slots.ask("i-1", e.url);
    await settle();
    expect(cache.knowsSlots("i-1")).toBe(false);
    now += RETRY_MS - 1;
    slots.ask("i-1", e.url);
    await settle();
    expect(e.seen).toHaveLength(1);
    now += 1;
    slots.ask("i-1", e.url);
    await settle();
    expect(e.seen).toHaveLength(2);
  });

  it("an engine that cannot be reached costs nothing but a later retry", async () => {
    const cache = new PromptCacheMap();
    const slots = new EngineSlots({ cache, connectTimeoutMs: 200 });
    slots.ask("i-1", "http://127.0.0.1:1");
    await settle();
    expect(cache.knowsSlots("i-1")).toBe(false);
  });
});
