import { Agent, request } from "node:http";
import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";
import { Hono } from "hono";
import { afterEach, describe, expect, it } from "vitest";
import { openSink } from "./sink.ts";

/** A server whose one route streams `events` through openSink (read back with node:http). */
function streamingServer(events: string[]) {
  const app = new Hono();
  app.get("/s", (c) => {
    const sink = openSink(c, { "x-test": "1" }, () => {});
    for (const e of events) sink.write(Buffer.from(e));
    sink.end();
    return sink.response;
  });
  const server = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" });
  return server;
}

const servers: ReturnType<typeof serve>[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.close();
});

describe("openSink under @hono/node-server", () => {
  it("streams the events in a chunked body, ends it, and keeps the connection", async () => {
    const server = streamingServer(["data: 1\n\n", "", "data: 22\n\n"]);
    servers.push(server);
    await new Promise((r) => server.once("listening", r));
    const { port } = server.address() as AddressInfo;
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const get = () =>
      new Promise<{ body: string; te: string | undefined; reused: boolean }>((resolve, reject) => {
        const req = request({ host: "127.0.0.1", port, path: "/s", agent }, (res) => {
          let body = "";
          res.on("data", (c: Buffer) => (body += c.toString()));
          res.on("end", () =>
            resolve({ body, te: res.headers["transfer-encoding"], reused: req.reusedSocket }),
          );
        });
        req.on("error", reject);
        req.end();
      });
    const first = await get();
    expect(first).toEqual({ body: "data: 1\n\ndata: 22\n\n", te: "chunked", reused: false });
    // The body ended where its chunked framing said: the next request rides the same connection.
    const second = await get();
    expect(second).toEqual({ body: "data: 1\n\ndata: 22\n\n", te: "chunked", reused: true });
    agent.destroy();
  });
});
