import { describe, expect, it } from "vitest";
import { createServer } from "node:http";
import { createServer as createTcpServer } from "node:net";
import type { AddressInfo, Socket } from "node:net";
import { PassThrough } from "node:stream";
import { createLogger, IngestStream, LogTail } from "./index.ts";

function collect() {
  const stream = new PassThrough();
  const lines: string[] = [];
  stream.on("data", (c: Buffer) => lines.push(...c.toString().trim().split("\n")));
  return { stream, lines };
}

describe("createLogger", () => {
  it("writes JSON lines with component fields when enabled", async () => {
    const { stream, lines } = collect();
    const log = createLogger({ enabled: true, destination: stream }).child({ component: "x" });
    log.info({ n: 1 }, "hello");
    await new Promise((r) => setImmediate(r));
    const rec = JSON.parse(lines[0] ?? "{}");
    expect(rec).toMatchObject({ component: "x", n: 1, msg: "hello", level: 30 });
  });

  it("never writes a token, even nested", async () => {
    const { stream, lines } = collect();
    const log = createLogger({ enabled: true, destination: stream });
    log.info({ hf_token: "hf_secret1", cfg: { token: "hf_secret2" } }, "cfg");
    await new Promise((r) => setImmediate(r));
    expect(lines.join("\n")).not.toContain("hf_secret");
  });

  it("honours the level: debug lines are written at debug, not at info", async () => {
    const debug = collect();
    createLogger({ enabled: true, level: "debug", destination: debug.stream }).debug("dbg");
    const info = collect();
    createLogger({ enabled: true, level: "info", destination: info.stream }).debug("dbg");
    await new Promise((r) => setImmediate(r));
    expect(debug.lines.map((l) => (JSON.parse(l) as { msg: string }).msg)).toEqual(["dbg"]);
    expect(info.lines).toEqual([]);
  });

  it("is silent when disabled", () => {
    const log = createLogger({ enabled: false });
    expect(log.level).toBe("silent");
  });
});

describe("LogTail", () => {
  it("keeps the most recent lines within its count and byte bounds", () => {
    const tail = new LogTail({ maxLines: 3, maxBytes: 1000 });
    for (let i = 0; i < 10; i++) tail.write(`{"n":${i}}\n`);
    expect(tail.recent()).toEqual(['{"n":7}', '{"n":8}', '{"n":9}']);
    expect(tail.recent(2)).toEqual(['{"n":8}', '{"n":9}']);
    expect(tail.stats).toMatchObject({ lines: 3, written: 10, evicted: 7 });
    const small = new LogTail({ maxLines: 100, maxBytes: 30 });
    for (let i = 0; i < 10; i++) small.write(`{"n":${i}}`);
    expect(small.stats.bytes).toBeLessThanOrEqual(30);
    expect(small.recent().at(-1)).toBe('{"n":9}');
  });

  it("keeps a huge line as a short record that says how long it was", () => {
    const tail = new LogTail({ maxLineBytes: 100 });
    tail.write(JSON.stringify({ level: 30, time: 1, msg: "x".repeat(5000) }));
    const rec = JSON.parse(tail.recent()[0]!) as Record<string, unknown>;
    expect(rec).toMatchObject({ level: 30, time: 1 });
    expect(rec.truncated_bytes).toBeGreaterThan(5000);
    expect((rec.msg as string).length).toBe(512);
  });

  it("feeds subscribers every new line; one that throws is dropped without breaking logging", async () => {
    const tail = new LogTail();
    const { stream } = collect();
    const log = createLogger({ enabled: true, destination: stream, tail });
    const seen: string[] = [];
    const off = tail.subscribe((l) => seen.push(l));
    tail.subscribe(() => {
      throw new Error("bad subscriber");
    });
    log.info("one");
    log.info("two");
    off();
    log.info("three");
    expect(seen.map((l) => (JSON.parse(l) as { msg: string }).msg)).toEqual(["one", "two"]);
    expect(tail.stats.subscribers).toBe(0);
    expect(tail.recent().map((l) => (JSON.parse(l) as { msg: string }).msg)).toEqual([
      "one",
      "two",
      "three",
    ]);
  });

  it("the tail takes the root's level: debug lines reach it at debug", () => {
    const tail = new LogTail();
    createLogger({ enabled: true, level: "debug", destination: collect().stream, tail }).debug("d");
    expect(tail.recent()).toHaveLength(1);
  });
});

describe("log ingest", () => {
  /** A sink that accepts connections and never answers (a dead collector). */
  async function blackHole() {
    const sockets = new Set<Socket>();
    const server = createTcpServer((s) => {
      sockets.add(s);
      s.on("error", () => {});
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    const port = (server.address() as AddressInfo).port;
    return {
      url: `http://127.0.0.1:${port}/ingest`,
      close: async () => {
        for (const s of sockets) s.destroy();
        await new Promise((r) => server.close(r));
      },
    };
  }

  it("a dead sink never stalls logging and the buffer stays within its bounds", async () => {
    const sink = await blackHole();
    try {
      const ingest = new IngestStream(sink.url, {
        maxLines: 500,
        maxBytes: 40_000,
        intervalMs: 20,
      });
      const line = `${JSON.stringify({ level: 30, msg: "y".repeat(100) })}\n`;
      const started = performance.now();
      for (let i = 0; i < 20_000; i++) {
        ingest.write(line);
        if (i % 5000 === 0) await new Promise((r) => setTimeout(r, 30));
      }
      await new Promise((r) => setImmediate(r));
      expect(performance.now() - started).toBeLessThan(2000);
      const s = ingest.stats;
      expect(s.in_flight).toBe(true);
      expect(s.buffered_lines).toBeLessThanOrEqual(500);
      expect(s.buffered_bytes).toBeLessThanOrEqual(40_000);
      expect(s.dropped_lines).toBeGreaterThan(15_000);
      ingest.destroy();
    } finally {
      await sink.close();
    }
  });

  it("a logger with an unreachable or silent ingest_url logs at full speed", async () => {
    const sink = await blackHole();
    try {
      for (const url of [sink.url, "http://127.0.0.1:1/ingest"]) {
        const { stream, lines } = collect();
        const log = createLogger({
          enabled: true,
          ingestUrl: url,
          destination: stream,
          tail: null,
        });
        const started = performance.now();
        for (let i = 0; i < 20_000; i++) log.info({ i }, "line");
        expect(performance.now() - started).toBeLessThan(3000);
        await new Promise((r) => setImmediate(r));
        expect(lines).toHaveLength(20_000);
      }
    } finally {
      await sink.close();
    }
  });

  it("posts batches of NDJSON to a live sink", async () => {
    const got: string[] = [];
    const server = createServer((req, res) => {
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString()));
      req.on("end", () => {
        got.push(...body.trim().split("\n"));
        res.end("ok");
      });
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const port = (server.address() as AddressInfo).port;
      const ingest = new IngestStream(`http://127.0.0.1:${port}/`, { intervalMs: 10 });
      ingest.write('{"a":1}\n');
      ingest.write('{"a":2}\n');
      await ingest.flush();
      expect(got).toEqual(['{"a":1}', '{"a":2}']);
      expect(ingest.stats).toMatchObject({ sent_lines: 2, buffered_lines: 0, dropped_lines: 0 });
      ingest.destroy();
    } finally {
      await new Promise((r) => server.close(r));
    }
  });
});
