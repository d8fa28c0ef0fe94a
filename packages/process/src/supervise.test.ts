import { describe, expect, it } from "vitest";
import { supervise } from "./supervise.ts";
import { FakeClock } from "@ic/protocol";
import type { SuperviseOptions, SuperviseResult } from "./supervise.ts";
import type { RestartPolicy, RunOutcome } from "./policy.ts";
import type { Child, ChildExit } from "./spawn.ts";

class FakeChild implements Child {
  readonly stdout = null;
  readonly stderr = null;
  readonly diesWithParent = true;
  readonly exited: Promise<ChildExit>;
  readonly stops: number[] = [];
  ready = false;
  private settle!: (e: ChildExit) => void;
  constructor(readonly pid: number) {
    this.exited = new Promise((r) => (this.settle = r));
  }
  exit(code: number | undefined, signal?: string): void {
    this.settle({ code, signal });
  }
  stop(graceMs: number): Promise<ChildExit> {
    this.stops.push(graceMs);
    this.exit(undefined, "SIGTERM");
    return this.exited;
  }
}

const policy: RestartPolicy = {
  backoffMs: 100,
  maxBackoffMs: 10_000,
  healthyUptimeMs: 60_000,
  maxCrashes: 3,
  onDeadline: "fail",
  firstRunMustBeReady: false,
};

/** A supervisor over fake children; `behave` scripts each new child (by run number). */
function harness(
  behave: (child: FakeChild, run: number) => void,
  over: Partial<SuperviseOptions> = {},
) {
  const clock = new FakeClock(0);
  const abort = new AbortController();
  const children: FakeChild[] = [];
  const spawnedAt: number[] = [];
  const outcomes: RunOutcome[] = [];
  let result: SuperviseResult | undefined;
  void supervise({
    signal: abort.signal,
    command: () => ({ bin: "fake", args: [] }),
    spawn: () => {
      const c = new FakeChild(1000 + children.length);
      children.push(c);
      spawnedAt.push(clock.now());
      behave(c, children.length - 1);
      return c;
    },
    ready: (c) => Promise.resolve((c as FakeChild).ready),
    readyPollMs: 10,
    readyDeadlineMs: 1000,
    stopGraceMs: 250,
    policy,
    clock,
    random: () => 0.5,
    onOutcome: (o) => void outcomes.push(o),
    ...over,
  }).then((r) => (result = r));
  return { clock, abort, children, spawnedAt, outcomes, result: () => result };
}

describe("supervise", () => {
  it("restarts a child that dies during startup once per death, each after its own backoff", async () => {
    const t = harness((c) => c.exit(1));
    await t.clock.advance(5000);
    expect(t.spawnedAt).toEqual([0, 100, 300, 700]);
    expect(t.outcomes.map((o) => o.kind)).toEqual(["crashed", "crashed", "crashed", "crashed"]);
    expect(t.result()).toEqual({
      kind: "failed",
      reason: "crashed 3 times in a row (last exit code 1, signal none)",
      outcome: { kind: "crashed", code: 1, signal: undefined },
    });
  });

  it("measures uptime from readiness, and a stable run resets the backoff", async () => {
    const t = harness((c) => {
      c.ready = true;
    });
    await t.clock.advance(50);
    t.children[0]!.exit(139); // after 50 ms: a crash in a row
    await t.clock.advance(100);
    expect(t.spawnedAt).toEqual([0, 150]);
    await t.clock.advance(70_000);
    t.children[1]!.exit(139); // after a healthy uptime: the series starts over
    await t.clock.advance(99);
    expect(t.children).toHaveLength(2);
    await t.clock.advance(1);
    expect(t.spawnedAt).toEqual([0, 150, 70_250]);
    expect(t.outcomes).toEqual([
      { kind: "exited", code: 139, signal: undefined, uptimeMs: 50 },
      { kind: "exited", code: 139, signal: undefined, uptimeMs: 70_000 },
    ]);
    t.abort.abort();
    await t.clock.advance(0);
    expect(t.result()).toEqual({ kind: "stopped" });
  });

  it("stops a child that misses its readiness deadline and gives up under a fail-on-deadline policy", async () => {
    const t = harness(() => {});
    await t.clock.advance(999);
    expect(t.children[0]!.stops).toEqual([]);
    await t.clock.advance(20);
    expect(t.children[0]!.stops).toEqual([250]);
    expect(t.outcomes).toEqual([{ kind: "deadline" }]);
    expect(t.result()).toMatchObject({ kind: "failed", reason: "warmup exceeded its deadline" });
    await t.clock.advance(10_000);
    expect(t.children).toHaveLength(1);
  });

  it("a child that must be ready on its first run is not restarted when it is not", async () => {
    const t = harness((c) => c.exit(1), { policy: { ...policy, firstRunMustBeReady: true } });
    await t.clock.advance(10_000);
    expect(t.children).toHaveLength(1);
    expect(t.result()).toMatchObject({ kind: "failed" });
  });

  it("an abort while the child runs stops it with the grace and spawns nothing more", async () => {
    const t = harness((c) => {
      c.ready = true;
    });
    await t.clock.advance(500);
    t.abort.abort();
    await t.clock.advance(0);
    expect(t.children[0]!.stops).toEqual([250]);
    expect(t.outcomes).toEqual([{ kind: "stopped" }]);
    expect(t.result()).toEqual({ kind: "stopped" });
    await t.clock.advance(10_000);
    expect(t.children).toHaveLength(1);
  });

  it("an abort during the backoff ends the loop without another spawn", async () => {
    const t = harness((c) => c.exit(1));
    await t.clock.advance(50);
    expect(t.children).toHaveLength(1);
    t.abort.abort();
    await t.clock.advance(10_000);
    expect(t.children).toHaveLength(1);
    expect(t.result()).toEqual({ kind: "stopped" });
  });

  it("a spawn that throws is a crash, retried like one", async () => {
    let n = 0;
    const t = harness(() => {}, {
      spawn: () => {
        n++;
        throw new Error("EACCES");
      },
    });
    await t.clock.advance(5000);
    expect(n).toBe(4);
    expect(t.outcomes[0]).toEqual({
      kind: "crashed",
      code: undefined,
      signal: undefined,
      error: "EACCES",
    });
  });
});
