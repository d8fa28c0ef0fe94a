// The load generator against a scripted engine: what a client measures of each streamed answer, the
// history a multi-turn session sends, and both arrival modes.
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { drive } from "./load.ts";
import type { Target } from "./load.ts";
import type { Session } from "./shapes.ts";

/** Between the two tokens: long enough that a client starved by a loaded machine still sees most of it. */
const GAP_MS = 200;
const seen: { messages: { role: string; content: string }[]; max_tokens: number }[] = [];
const server = createServer((req, res) => {
  let body = "";
  req.on("data", (c: Buffer) => (body += c.toString()));
  req.on("end", () => {
    const b = JSON.parse(body) as (typeof seen)[number];
    seen.push(b);
    res.writeHead(200, { "content-type": "text/event-stream", "x-instance-id": "i-1" });
    const chunk = (s: string) =>
      `data: {"choices":[{"index":0,"delta":{"content":${JSON.stringify(s)}}}]}\n\n`;
    res.write(chunk("a"));
    setTimeout(() => {
      res.write(chunk("b"));
      res.end(
        `data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"timings":{"cache_n":7,"prompt_n":3,"predicted_n":2}}\n\ndata: [DONE]\n\n`,
      );
    }, GAP_MS);
  });
});
let target: Target;
beforeAll(async () => {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  target = { baseUrls: [url], model: "m", headers: {} };
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

const sessions: Session[] = [0, 1, 2].map((s) => ({
  system: "sys",
  turns: [
    { user: `s${s} first`, maxTokens: 5 },
    { user: `s${s} second`, maxTokens: 6 },
  ],
}));

describe("drive", () => {
  it("closed loop: every turn measured, with its history and the engine's counts", async () => {
    seen.length = 0;
    const { samples, wallS } = await drive(target, sessions, { kind: "closed", users: 2 });
    expect(samples).toHaveLength(6);
    expect(wallS).toBeGreaterThan(0);
    for (const s of samples) {
      expect(s.error).toBeUndefined();
      expect(s.ttftMs).toBeGreaterThan(0);
      expect(s.itlMs).toHaveLength(1);
      expect(s.itlMs[0]).toBeGreaterThanOrEqual(GAP_MS / 2);
      expect(s).toMatchObject({ tokens: 2, cachedTokens: 7, promptTokens: 10, instance: "i-1" });
    }
    const second = seen.find((b) => b.messages.at(-1)!.content === "s1 second")!;
    expect(second.messages).toEqual([
      { role: "system", content: "sys" },
      { role: "user", content: "s1 first" },
      { role: "assistant", content: "ab" },
      { role: "user", content: "s1 second" },
    ]);
    expect(second.max_tokens).toBe(6);
    // A session's second turn is sent when its first has been answered, not before.
    for (const session of [0, 1, 2]) {
      const [a, b] = samples.filter((x) => x.session === session).sort((x, y) => x.turn - y.turn);
      expect(b!.sentMs).toBeGreaterThanOrEqual(a!.sentMs + a!.e2eMs);
    }
  });

  it("open loop: sessions start at their arrivals, not when the one before ended", async () => {
    seen.length = 0;
    const { samples } = await drive(target, sessions, { kind: "open", rate: 1000, seed: 3 });
    expect(samples).toHaveLength(6);
    // Arrivals ~1 ms apart, answers ~20 ms long: every session's first turn comes before any second.
    const order = seen.map((b) => b.messages.at(-1)!.content.split(" ")[1]);
    expect(order.slice(0, 3)).toEqual(["first", "first", "first"]);
  });

  it("a failed turn is counted as an error and ends its session", async () => {
    const bad: Target = { ...target, baseUrls: ["http://127.0.0.1:1"] };
    const { samples } = await drive(bad, sessions.slice(0, 1), { kind: "closed", users: 1 });
    expect(samples).toHaveLength(1);
    expect(samples[0]!.error).toBeDefined();
  });
});
