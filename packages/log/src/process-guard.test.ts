import { EventEmitter } from "node:events";
import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createLogger } from "./index.ts";
import { guardProcess } from "./process-guard.ts";

function collecting() {
  const lines: Record<string, unknown>[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split("\n")) if (l) lines.push(JSON.parse(l));
      cb();
    },
  });
  return { lines, log: createLogger({ enabled: true, destination, tail: null }) };
}

describe("guardProcess", () => {
  it("logs an unhandled rejection with its cause and keeps the process", async () => {
    const { lines, log } = collecting();
    const proc = new EventEmitter();
    const exits: number[] = [];
    const guard = guardProcess(log, { exit: (c) => exits.push(c) }, proc);
    const err = new Error("MAX_PAYLOAD_EXCEEDED", { cause: new Error("inner") });
    proc.emit("unhandledRejection", err, Promise.resolve());
    await new Promise((r) => setImmediate(r));
    expect(guard.rejections()).toBe(1);
    expect(exits).toEqual([]);
    const line = lines.find((l) => l.kind === "unhandledRejection")!;
    expect(line.level).toBe(50);
    expect(JSON.stringify(line.err)).toContain("MAX_PAYLOAD_EXCEEDED");
    guard.uninstall();
    expect(proc.listenerCount("unhandledRejection")).toBe(0);
  });

  it("ends the process after an uncaught exception, logged as fatal", async () => {
    const { lines, log } = collecting();
    const proc = new EventEmitter();
    const exits: number[] = [];
    guardProcess(log, { exit: (c) => exits.push(c) }, proc);
    proc.emit("uncaughtException", new TypeError("boom"), "uncaughtException");
    await new Promise((r) => setImmediate(r));
    expect(exits).toEqual([1]);
    expect(lines.find((l) => l.level === 60)?.msg).toContain("uncaught exception");
  });
});
