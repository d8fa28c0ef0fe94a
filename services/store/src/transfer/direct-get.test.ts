// The direct store-file client against scripted HTTP servers: heads split or carrying body bytes, a
// sink that runs out of room (the socket pauses, nothing is lost), and every way a response can be
// wrong or cut short ending in an error rather than a short body.
import { afterEach, describe, expect, it } from "vitest";
import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { createServer, type AddressInfo, type Server, type Socket } from "node:net";
import { directGet, type DirectSink } from "./direct-get.ts";

const servers = new Set<{ server: Server; conns: Set<Socket> }>();
afterEach(async () => {
  for (const { server, conns } of servers) {
    for (const c of conns) c.destroy();
    await new Promise((r) => server.close(r));
  }
  servers.clear();
});

/** Answers each request with `respond`, after recording the request head. */
async function scripted(
  respond: (socket: Socket) => Promise<void>,
  requests: string[] = [],
): Promise<URL> {
  const conns = new Set<Socket>();
  const server = createServer((socket) => {
    conns.add(socket);
    socket.on("close", () => conns.delete(socket));
    socket.on("error", () => undefined);
    socket.once("data", (d: Buffer) => {
      requests.push(d.toString("latin1"));
      respond(socket).catch(() => socket.destroy());
    });
  });
  servers.add({ server, conns });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/store/f?x=1`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A sink that offers at most `room` bytes per region and is full every `fullEvery`-th time. */
function memorySink(room: number, fullEvery = 0) {
  const parts: Buffer[] = [];
  let region = Buffer.alloc(room);
  let offers = 0;
  let fulls = 0;
  const sink: DirectSink = {
    space() {
      offers++;
      if (fullEvery > 0 && offers % fullEvery === 0) {
        fulls++;
        return undefined;
      }
      region = Buffer.alloc(room);
      return region;
    },
    commit(n) {
      parts.push(Buffer.from(region.subarray(0, n)));
    },
    push(chunk) {
      parts.push(Buffer.from(chunk));
      return undefined;
    },
    async ready() {
      await sleep(5);
    },
  };
  return {
    sink,
    bytes: () => Buffer.concat(parts),
    fulls: () => fulls,
  };
}

const never = new AbortController().signal;

describe("direct store-file GET", () => {
  it("sends the request line and headers, and reads a body through a sink that fills up", async () => {
    const body = randomBytes(3 * 1024 * 1024 + 17);
    const requests: string[] = [];
    const url = await scripted(async (s) => {
      // The head in two pieces, the second carrying the first body bytes.
      s.write("HTTP/1.1 200 OK\r\ncontent-le");
      await sleep(10);
      s.write(Buffer.concat([Buffer.from(`ngth: ${body.length}\r\n\r\n`), body.subarray(0, 1000)]));
      for (let off = 1000; off < body.length; off += 100_000) {
        if (!s.write(body.subarray(off, off + 100_000))) await once(s, "drain");
      }
      s.end();
    }, requests);
    const res = await directGet(url, { authorization: "Bearer x", range: "bytes=0-" }, never);
    expect(res.status).toBe(200);
    expect(res.body.length).toBe(body.length);
    const m = memorySink(300_000, 3);
    await res.body.run(m.sink, never);
    expect(m.bytes().equals(body)).toBe(true);
    expect(m.fulls()).toBeGreaterThan(0);
    expect(requests[0]).toMatch(/^GET \/store\/f\?x=1 HTTP\/1\.1\r\n/);
    expect(requests[0]).toContain("\r\nauthorization: Bearer x\r\n");
    expect(requests[0]).toContain("\r\nconnection: close\r\n");
  });

  it("exposes status and headers of an error answer, whose body can be dropped", async () => {
    const url = await scripted(async (s) => {
      s.end(
        "HTTP/1.1 416 Range Not Satisfiable\r\ncontent-range: bytes */10\r\ncontent-length: 2\r\n\r\n{}",
      );
    });
    const res = await directGet(url, {}, never);
    expect(res.status).toBe(416);
    expect(res.headers.get("content-range")).toBe("bytes */10");
    res.body.cancel();
  });

  it("keeps a body that arrived whole with the head, even when the server closed at once", async () => {
    const url = await scripted(async (s) => {
      s.end(
        "HTTP/1.1 206 Partial Content\r\ncontent-length: 5\r\ncontent-range: bytes 5-9/10\r\n\r\nhello",
      );
    });
    const res = await directGet(url, {}, never);
    await sleep(50); // the close reaches the client before the body is run
    const m = memorySink(1024);
    await res.body.run(m.sink, never);
    expect(m.bytes().toString()).toBe("hello");
  });

  it("fails a body cut short instead of ending it early", async () => {
    const url = await scripted(async (s) => {
      s.write("HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n");
      s.end(randomBytes(40_000));
    });
    const res = await directGet(url, {}, never);
    const m = memorySink(8192);
    await expect(res.body.run(m.sink, never)).rejects.toThrow(/closed after 40000 of 100000/);
    expect(m.bytes().length).toBe(40_000);
  });

  it("refuses responses it cannot delimit, and headers that would split the request", async () => {
    const chunked = await scripted(async (s) => {
      s.end("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n");
    });
    await expect(directGet(chunked, {}, never)).rejects.toThrow(/transfer-encoding chunked/);
    const unsized = await scripted(async (s) => {
      s.end("HTTP/1.1 200 OK\r\n\r\nabc");
    });
    await expect(directGet(unsized, {}, never)).rejects.toThrow(/content-length/);
    const garbage = await scripted(async (s) => {
      s.end("SSH-2.0-OpenSSH\r\n\r\n");
    });
    await expect(directGet(garbage, {}, never)).rejects.toThrow(/not an HTTP\/1.1 response/);
    expect(() => directGet(chunked, { "x-a": "1\r\nx-b: 2" }, never)).toThrow(/invalid header/);
    expect(() => directGet(new URL("https://127.0.0.1/"), {}, never)).toThrow(/http URL/);
  });

  it("stops on abort, during the head and during the body", async () => {
    const silent = await scripted(() => new Promise(() => undefined));
    const early = new AbortController();
    const head = directGet(silent, {}, early.signal);
    early.abort(new Error("stop 1"));
    await expect(head).rejects.toThrow("stop 1");

    const slow = await scripted(async (s) => {
      s.write("HTTP/1.1 200 OK\r\ncontent-length: 1000000\r\n\r\n");
      s.write(randomBytes(1000));
    });
    const late = new AbortController();
    const res = await directGet(slow, {}, late.signal);
    const run = res.body.run(memorySink(4096).sink, late.signal);
    await sleep(20);
    late.abort(new Error("stop 2"));
    await expect(run).rejects.toThrow("stop 2");
  });

  it("fails a body that stops arriving, but not while the transfer itself holds it back", async () => {
    const stalled = await scripted(async (s) => {
      s.write("HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n");
      s.write(randomBytes(10));
    });
    const res = await directGet(stalled, {}, never, { idleTimeoutMs: 100 });
    await sleep(250); // waiting to be run is not idleness
    await expect(res.body.run(memorySink(4096).sink, never)).rejects.toThrow(
      /no data from .* for 0.1 s/,
    );

    const body = randomBytes(300_000);
    const slowSink = await scripted(async (s) => {
      s.end(
        Buffer.concat([
          Buffer.from(`HTTP/1.1 200 OK\r\ncontent-length: ${body.length}\r\n\r\n`),
          body,
        ]),
      );
    });
    const res2 = await directGet(slowSink, {}, never, { idleTimeoutMs: 100 });
    const m = memorySink(50_000, 2);
    // The sink stays full for longer than the idle timeout.
    m.sink.ready = async () => {
      await sleep(150);
    };
    await res2.body.run(m.sink, never);
    expect(m.bytes().equals(body)).toBe(true);
  });

  it("reports a refused connection as an error", async () => {
    const url = await scripted(async () => undefined);
    const { server, conns } = [...servers][0]!;
    for (const c of conns) c.destroy();
    await new Promise((r) => server.close(r));
    servers.clear();
    await expect(directGet(url, {}, never)).rejects.toThrow(/ECONNREFUSED/);
  });
});
