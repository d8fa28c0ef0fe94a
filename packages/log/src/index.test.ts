import { describe, expect, it } from "vitest";
import { PassThrough } from "node:stream";
import { createLogger } from "./index.ts";

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
