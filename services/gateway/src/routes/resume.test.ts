// Resumable streams against a scripted engine that keeps each stream under its X-Conversation-Id
// and replays it from a byte offset (as llama-server's GET /v1/stream does): the conversation id,
// the event ids, reading again by the same token only, and cancelling a stream whose client left.
import { afterEach, describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import type { ApiToken } from "@ic/http";
import { createGatewayApp } from "../app.ts";
import { StreamDirectory } from "../streams/directory.ts";
import { closers, cluster, engine, errorOf, listen, MODEL } from "../testing/scripted.ts";
import type { ChatLimits } from "./chat.ts";

afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

const ENGINE_ID = `chatcmpl-${"e".repeat(32)}`;
const chunk = (content: string) =>
  `data: {"choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}}}],"id":"${ENGINE_ID}"}\n\n`;
const WORDS = ["one", " two", " three", " four"];
const STREAM = WORDS.map(chunk).join("") + "data: [DONE]\n\n";

const tokens: ApiToken[] = [
  { name: "app", token: "app-token-0123456789", scopes: ["inference"] },
  { name: "other", token: "other-token-0123456789", scopes: ["inference"] },
];
const auth = (t: ApiToken) => ({ authorization: `Bearer ${t.token}` });

/**
 * An engine that streams STREAM (holding the last event back while `hold` is set), keeps it under
 * the request's x-conversation-id, and answers GET /v1/stream?conv_id=&from= with the rest.
 */
async function keepingEngine() {
  const kept = new Map<string, string>();
  let hold = false;
  const e = await engine((req, res) => {
    const url = new URL(req.url ?? "/", "http://x");
    if (req.method === "GET") {
      const text = kept.get(url.searchParams.get("conv_id") ?? "");
      if (text === undefined) return void res.writeHead(404).end('{"error":{"code":404}}');
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(text.slice(Number(url.searchParams.get("from") ?? 0)));
      return;
    }
    kept.set(String(req.headers["x-conversation-id"]), STREAM);
    res.writeHead(200, { "content-type": "text/event-stream" });
    if (!hold) return void res.end(STREAM);
    // The first two events, then nothing: the client leaves before the end.
    res.write(chunk(WORDS[0]!) + chunk(WORDS[1]!));
  });
  return { ...e, kept, holdNext: () => (hold = true) };
}

async function gateway(endpoint: string, limits: Partial<ChatLimits> = {}) {
  const streams = new StreamDirectory();
  const app = createGatewayApp({
    cluster: cluster(endpoint).view,
    log: silentLogger(),
    name: "t",
    auth: { tokens },
    chat: { prefix_routing: "off", ...limits },
    streams,
  });
  const base = await listen(app);
  return { base, streams };
}

const ask = { model: MODEL, messages: [{ role: "user", content: "count" }], stream: true };

function post(base: string, headers: Record<string, string>, signal?: AbortSignal) {
  return fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(ask),
    ...(signal ? { signal } : {}),
  });
}

/** The text of a body's chat chunks, and its events' ids. */
function read(text: string): { content: string; ids: number[] } {
  let content = "";
  const ids: number[] = [];
  for (const ev of text.split("\n\n")) {
    const id = /^id: (\d+)$/m.exec(ev);
    if (id) ids.push(Number(id[1]));
    const data = /^data: (.*)$/m.exec(ev)?.[1];
    if (!data || data === "[DONE]") continue;
    content += (JSON.parse(data) as { choices: { delta: { content: string } }[] }).choices[0]!.delta
      .content;
  }
  return { content, ids };
}

describe("resumable streams", () => {
  it("a stream has a conversation id, and its events carry the engine's byte offsets", async () => {
    const e = await keepingEngine();
    const g = await gateway(e.url);
    const r = await post(g.base, auth(tokens[0]!));
    const conv = r.headers.get("x-conversation-id")!;
    expect(conv).toMatch(/^conv-[0-9a-f-]{36}$/);
    const { content, ids } = read(await r.text());
    expect(content).toBe(WORDS.join(""));
    // After each event: where the next one starts in the engine's own bytes.
    let at = 0;
    expect(ids).toEqual([...WORDS.map((w) => (at += chunk(w).length)), STREAM.length]);
    // The engine keeps it under the command id, not the client's conversation id.
    expect(e.conversations).toEqual([r.headers.get("x-command-id")]);
    // The client's own id is echoed; a bad one is refused before anything is sent.
    const own = await post(g.base, { ...auth(tokens[0]!), "x-conversation-id": "my-chat-42" });
    expect(own.headers.get("x-conversation-id")).toBe("my-chat-42");
    await own.text();
    const bad = await post(g.base, { ...auth(tokens[0]!), "x-conversation-id": "has space" });
    expect(bad.status).toBe(400);
    expect(e.bodies).toHaveLength(2);
    // Streams that ran to their end are not cancelled.
    await new Promise((r) => setTimeout(r, 100));
    expect(e.cancelled).toEqual([]);
  });

  it("is read again from Last-Event-ID by the token that started it, as the same answer", async () => {
    const e = await keepingEngine();
    const g = await gateway(e.url);
    const r = await post(g.base, { ...auth(tokens[0]!), "x-conversation-id": "c-7" });
    const first = read(await r.text());
    const from = first.ids[1]!;
    const again = await fetch(`${g.base}/v1/stream?conversation_id=c-7`, {
      headers: { ...auth(tokens[0]!), "last-event-id": String(from) },
    });
    expect(again.status).toBe(200);
    expect(again.headers.get("x-command-id")).toBe(r.headers.get("x-command-id"));
    const text = await again.text();
    // The rest: the ids go on from there, and the engine's id is the command id again.
    const rest = read(text);
    expect(rest.content).toBe(WORDS.slice(2).join(""));
    expect(rest.ids).toEqual(first.ids.slice(2));
    expect(text).toContain(`"id":"${r.headers.get("x-command-id")}"`);
    // `from` in the query works the same; another token finds nothing.
    const q = await fetch(`${g.base}/v1/stream?conversation_id=c-7&from=0`, {
      headers: auth(tokens[0]!),
    });
    expect(read(await q.text()).content).toBe(WORDS.join(""));
    const stranger = await fetch(`${g.base}/v1/stream?conversation_id=c-7`, {
      headers: auth(tokens[1]!),
    });
    expect(stranger.status).toBe(404);
    expect(errorOf(await stranger.text()).message).toContain("another token started it");
    const badOffset = await fetch(`${g.base}/v1/stream?conversation_id=c-7&from=-1`, {
      headers: auth(tokens[0]!),
    });
    expect(badOffset.status).toBe(400);
  });

  it("a client that leaves: its stream is cancelled in the engine, at once or after the grace unless read again", async () => {
    const e = await keepingEngine();
    const g = await gateway(e.url, { resume_grace_ms: 300 });
    const leave = async (headers: Record<string, string>) => {
      e.holdNext();
      const ac = new AbortController();
      const r = await post(g.base, { ...auth(tokens[0]!), ...headers }, ac.signal);
      const reader = r.body!.getReader();
      await reader.read();
      ac.abort();
      return r.headers.get("x-command-id")!;
    };
    // The gateway's own id: nobody else knows it; cancelled at once.
    const made = await leave({});
    await expect.poll(() => e.cancelled).toEqual([`/v1/stream?conv_id=${made}`]);
    // The client's own id: kept for the grace, then cancelled.
    const kept = await leave({ "x-conversation-id": "c-left" });
    await new Promise((r) => setTimeout(r, 100));
    expect(e.cancelled).toHaveLength(1);
    await expect.poll(() => e.cancelled).toContain(`/v1/stream?conv_id=${kept}`);
    // Read again within the grace: not cancelled.
    const resumed = await leave({ "x-conversation-id": "c-back" });
    const again = await fetch(`${g.base}/v1/stream?conversation_id=c-back&from=0`, {
      headers: auth(tokens[0]!),
    });
    expect(again.status).toBe(200);
    await again.text();
    await new Promise((r) => setTimeout(r, 500));
    expect(e.cancelled).not.toContain(`/v1/stream?conv_id=${resumed}`);
  });
});
