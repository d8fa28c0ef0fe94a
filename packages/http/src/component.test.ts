import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { createLogger } from "@ic/log";
import { ComponentStack } from "./component.ts";
import type { Component } from "./component.ts";
import type { HealthEntry } from "@ic/protocol";

function logged(): { log: ReturnType<typeof createLogger>; lines: string[] } {
  const lines: string[] = [];
  const log = createLogger({
    enabled: true,
    level: "warn",
    destination: new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString());
        done();
      },
    }),
  });
  return { log, lines };
}

/** A component that records its starts and stops in `events`. */
function part(name: string, events: string[], extra: Partial<Component> = {}): Component {
  return {
    name,
    start: () => void events.push(`start ${name}`),
    stop: () => void events.push(`stop ${name}`),
    ...extra,
  };
}

describe("ComponentStack", () => {
  it("starts in order and stops in reverse, once however often stop is called", async () => {
    const events: string[] = [];
    const stack = new ComponentStack(logged().log);
    for (const n of ["bus", "eventlog", "worker"]) await stack.start(part(n, events));
    await Promise.all([stack.stop(), stack.stop()]);
    await stack.stop();
    expect(events).toEqual([
      "start bus",
      "start eventlog",
      "start worker",
      "stop worker",
      "stop eventlog",
      "stop bus",
    ]);
  });

  it("does not stop a component whose start failed, and starts nothing once stopping", async () => {
    const events: string[] = [];
    const stack = new ComponentStack(logged().log);
    await stack.start(part("a", events));
    const broken = part("b", events, {
      start: () => Promise.reject(new Error("no port")),
    });
    await expect(stack.start(broken)).rejects.toThrow("no port");
    await stack.stop();
    await expect(stack.start(part("c", events))).rejects.toThrow("stopping");
    expect(events).toEqual(["start a", "stop a"]);
  });

  it("logs a failed stop and still stops the ones before it", async () => {
    const events: string[] = [];
    const { log, lines } = logged();
    const stack = new ComponentStack(log);
    await stack.start(part("a", events));
    await stack.start(part("b", events, { stop: () => Promise.reject(new Error("stuck")) }));
    await stack.stop();
    expect(events).toEqual(["start a", "start b", "stop a"]);
    expect(lines.map((l) => JSON.parse(l) as { component: string; msg: string })).toMatchObject([
      { component: "b", msg: "stop failed" },
    ]);
  });

  it("merges the heartbeat parts in start order, health entries appended", async () => {
    const stack = new ComponentStack(logged().log);
    const warn = (message: string): HealthEntry => ({
      code: "runner_failed",
      severity: "warn",
      message,
      remediation: "none",
    });
    await stack.start({ name: "a", heartbeat: () => ({ runners: [], health: [warn("one")] }) });
    await stack.start({ name: "b" });
    await stack.start({
      name: "c",
      heartbeat: () => ({ draining: true as const, health: [warn("two"), warn("three")] }),
    });
    expect(stack.heartbeat()).toEqual({
      runners: [],
      draining: true,
      health: [warn("one"), warn("two"), warn("three")],
    });
  });
});
