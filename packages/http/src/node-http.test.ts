// requestHeader against hono's own c.req.header, over a real Node server and raw HTTP requests: the
// fast read from the Node request's raw headers must answer exactly what the web Headers would.
import { createServer } from "node:http";
import type { Server } from "node:http";
import { connect } from "node:net";
import type { AddressInfo } from "node:net";
import { getRequestListener } from "@hono/node-server";
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { requestHeader } from "./node-http.ts";

const NAMES = ["authorization", "content-type", "origin", "host", "content-length", "x-absent"];

let server: Server;
let port = 0;

beforeAll(async () => {
  const app = new Hono();
  app.all("*", (c) =>
    c.json(NAMES.map((n) => ({ name: n, fast: requestHeader(c, n), web: c.req.header(n) }))),
  );
  server = createServer(getRequestListener((req, env) => app.fetch(req, env)));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  port = (server.address() as AddressInfo).port;
});

afterAll(() => new Promise<void>((r) => server.close(() => r())));

/** Sends `head` (request line and headers, CRLF-separated) as raw bytes; returns the JSON answer. */
function raw(head: string): Promise<{ name: string; fast?: string; web?: string }[]> {
  return new Promise((resolve, reject) => {
    const sock = connect(port, "127.0.0.1", () =>
      sock.write(`${head}\r\nconnection: close\r\n\r\n`),
    );
    const parts: Buffer[] = [];
    sock.on("data", (b) => parts.push(b));
    sock.on("error", reject);
    sock.on("end", () => {
      const text = Buffer.concat(parts).toString();
      const body = text.slice(text.indexOf("\r\n\r\n") + 4);
      try {
        resolve(JSON.parse(body) as { name: string; fast?: string; web?: string }[]);
      } catch (e) {
        reject(new Error(`not JSON: ${text}`, { cause: e }));
      }
    });
  });
}

describe("requestHeader", () => {
  it.each([
    ["plain headers", "GET / HTTP/1.1\r\nHost: a:1\r\nAuthorization: Bearer x"],
    ["any case", "GET / HTTP/1.1\r\nhOsT: a:1\r\nAUTHORIZATION: Bearer x\r\nContent-TYPE: text/a"],
    [
      "duplicates joined",
      "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer a\r\nauthorization: b",
    ],
    ["spaces and tabs around values", "GET / HTTP/1.1\r\nHost: a\r\nOrigin: \t http://x \t"],
    ["empty values", "GET / HTTP/1.1\r\nHost: a\r\nOrigin:\r\nContent-Type: "],
    ["latin-1 bytes", "GET / HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer \u00a0x\u00a0"],
  ])("reads what c.req.header reads: %s", async (_what, head) => {
    const got = await raw(head);
    expect(got).toHaveLength(NAMES.length);
    for (const g of got) expect(g.fast, g.name).toBe(g.web);
  });
});
