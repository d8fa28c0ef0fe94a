import type { Server } from "node:http";
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Hono } from "hono";
import { silentLogger } from "@ic/log";
import { listenHttp } from "./http-server.ts";

/** Writes raw bytes, returns everything the server sent until it closed the connection. */
function raw(port: number, bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    const got: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error("the server did not close the connection"));
    }, 5_000);
    socket.on("data", (c: Buffer) => got.push(c));
    socket.on("error", () => undefined);
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(Buffer.concat(got).toString("latin1"));
    });
    socket.write(bytes);
  });
}

function statusAndBody(response: string): { status: number; type: string; body: unknown } {
  const [head = "", body = ""] = response.split("\r\n\r\n");
  return {
    status: Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]),
    type: /^content-type: (.*)$/im.exec(head)?.[1]?.trim() ?? "",
    body: JSON.parse(body) as unknown,
  };
}

describe("HTTP layer", () => {
  let server: Server;
  let port: number;

  beforeAll(async () => {
    const app = new Hono();
    app.get("/ok", (c) => c.json({ ok: true }));
    app.post("/ok", async (c) => c.json({ ok: true, got: await c.req.text() }));
    server = await listenHttp(app, { host: "127.0.0.1", port: 0, log: silentLogger() });
    const addr = server.address();
    port = typeof addr === "object" && addr ? addr.port : 0;
  });
  afterAll(async () => {
    await new Promise<void>((r) => server.close(() => r()));
  });

  it.each([
    ["an unknown method", "BREW /ok HTTP/1.1\r\nHost: localhost\r\n\r\n", 400],
    [
      "a malformed Content-Length",
      "POST /ok HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2x\r\n\r\n{}",
      400,
    ],
    [
      "headers over node's limit",
      `GET /ok HTTP/1.1\r\nHost: localhost\r\nX-Long: ${"v".repeat(20_000)}\r\n\r\n`,
      431,
    ],
    [
      "a raw non-ASCII byte in the target",
      "GET /ok?x=\u00ff HTTP/1.1\r\nHost: localhost\r\n\r\n",
      400,
    ],
    [
      "a Host that is not a host",
      "GET /ok HTTP/1.1\r\nHost: a b\r\nConnection: close\r\n\r\n",
      400,
    ],
    [
      "a backslash in the path",
      "GET /\\..\\ok HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
      400,
    ],
    [
      "an unsupported Expect",
      "GET /ok HTTP/1.1\r\nHost: localhost\r\nExpect: bogus\r\nConnection: close\r\n\r\n",
      417,
    ],
  ])("answers %s with the JSON error envelope", async (_what, request, status) => {
    const res = statusAndBody(await raw(port, request));
    expect(res.status).toBe(status);
    expect(res.type).toMatch(/^application\/json/);
    expect(res.body).toEqual({ error: expect.any(String) });
  });

  it("still answers a request followed by stray bytes after Connection: close", async () => {
    const res = await raw(
      port,
      "POST /ok HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}junk",
    );
    expect(statusAndBody(res)).toMatchObject({ status: 200, body: { ok: true, got: "{}" } });
  });
});
