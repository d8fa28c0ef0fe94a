// The drain's last step against a real HTTP server and a keep-alive client (undici, as fetch and most
// load balancers keep connections): a request sent on a pooled idle connection after the listener
// closed is still answered (http.Server.close() would have reset it), new connections are refused,
// and the wait ends when the last connection closed, or at its bound.
import { afterEach, describe, expect, it } from "vitest";
import { createServer, type Server } from "node:http";
import { connect, type AddressInfo } from "node:net";
import { quiesceConnections } from "./http-quiesce.ts";

let server: Server | undefined;
afterEach(() => {
  server?.closeAllConnections();
  server?.close();
  server = undefined;
});

const connections = (s: Server) =>
  new Promise<number>((resolve) => s.getConnections((_e, n) => resolve(n)));

async function drainingServer() {
  let draining = false;
  const s = createServer((_req, res) => {
    if (draining) res.shouldKeepAlive = false;
    res.end("ok");
  });
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  server = s;
  const url = `http://127.0.0.1:${(s.address() as AddressInfo).port}/`;
  return { s, url, drain: () => (draining = true) };
}

describe("quiesceConnections", () => {
  it("answers a request sent on an idle pooled connection after the listener closed, refuses new connections, and ends when the last one closed", async () => {
    const { s, url, drain } = await drainingServer();
    // fetch keeps the connection in its pool (keep-alive), idle after the answer.
    const first = await fetch(url);
    expect(await first.text()).toBe("ok");
    expect(await connections(s)).toBe(1);
    drain();
    const waiting = quiesceConnections(s, 10_000);
    await new Promise((r) => setTimeout(r, 50));
    expect(s.listening).toBe(false);
    // Sent on the pooled connection (no new one could be opened): answered, and told to close.
    const second = await fetch(url, { method: "POST", body: "x" });
    expect(second.status).toBe(200);
    expect(second.headers.get("connection")).toBe("close");
    expect(await second.text()).toBe("ok");
    const started = Date.now();
    expect(await waiting).toBe(0);
    expect(Date.now() - started).toBeLessThan(2000);
    const refused = await new Promise<string>((resolve) => {
      const sock = connect(Number(new URL(url).port), "127.0.0.1");
      sock.on("connect", () => resolve("connected"));
      sock.on("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? "error"));
    });
    expect(refused).toBe("ECONNREFUSED");
  });

  it("stops waiting at its bound, saying how many connections are still open", async () => {
    const { s, url } = await drainingServer();
    const silent = connect(Number(new URL(url).port), "127.0.0.1");
    await new Promise((r) => silent.once("connect", r));
    const started = Date.now();
    expect(await quiesceConnections(s, 300)).toBe(1);
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    silent.destroy();
  });
});
