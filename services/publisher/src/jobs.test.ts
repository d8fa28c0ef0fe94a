import { describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import { FakeClock } from "@ic/protocol";
import { PublisherError } from "./errors.ts";
import { DONE_LINE, JobManager, SUCCESS_LINE } from "./jobs.ts";
import type { JobContext } from "./publish.ts";

/** A job body the test finishes by hand. */
function gated(): {
  body: (ctx: JobContext) => Promise<void>;
  ctx: () => JobContext;
  finish: (err?: Error) => void;
} {
  let ctx: JobContext | null = null;
  let resolve!: () => void;
  let reject!: (e: Error) => void;
  const done = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return {
    body: (c) => {
      ctx = c;
      return done;
    },
    ctx: () => {
      if (!ctx) throw new Error("job body not started");
      return ctx;
    },
    finish: (err) => (err ? reject(err) : resolve()),
  };
}

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

function manager(clock = new FakeClock(), secret?: string): JobManager {
  return new JobManager({
    clock,
    log: silentLogger(),
    retentionMs: 600_000,
    maxRunning: 2,
    secret: () => secret,
  });
}

describe("JobManager", () => {
  it("runs at most two jobs and refuses the third with a retryable busy error", async () => {
    const jobs = manager();
    const a = gated();
    const b = gated();
    jobs.start("a", a.body);
    jobs.start("b", b.body);
    let err: unknown;
    try {
      jobs.start("c", gated().body);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(PublisherError);
    expect((err as PublisherError).code).toBe("busy");
    expect((err as PublisherError).retryable).toBe(true);
    a.finish();
    await tick();
    expect(jobs.runningCount()).toBe(1);
    expect(() => jobs.start("c", gated().body)).not.toThrow();
  });

  it("ends the log with the success sentinel or an [error]: line, then [done]", async () => {
    const jobs = manager();
    const ok = gated();
    const bad = gated();
    const okId = jobs.start("ok", ok.body);
    const badId = jobs.start("bad", bad.body);
    ok.ctx().log("step");
    ok.finish();
    bad.finish(new Error("no MTP head tensors found in a/b"));
    await tick();
    const lines = (id: string): readonly string[] =>
      jobs.subscribe(id, () => undefined)?.replay ?? [];
    expect(lines(okId)).toEqual(["step", SUCCESS_LINE, DONE_LINE]);
    expect(lines(badId)).toEqual(["[error]: no MTP head tensors found in a/b", DONE_LINE]);
    expect(jobs.state(okId)).toBe("succeeded");
    expect(jobs.state(badId)).toBe("failed");
  });

  it("replays from the start and then follows, without losing or doubling lines", async () => {
    const jobs = manager();
    const g = gated();
    const id = jobs.start("j", g.body);
    g.ctx().log("one");
    const seen: string[] = [];
    const sub = jobs.subscribe(id, (l) => seen.push(l));
    expect(sub?.replay).toEqual(["one"]);
    expect(sub?.finished).toBe(false);
    g.ctx().log("two");
    sub?.unsubscribe();
    g.ctx().log("three");
    const again: string[] = [];
    const sub2 = jobs.subscribe(id, (l) => again.push(l));
    g.finish();
    await tick();
    expect(seen).toEqual(["two"]);
    expect([...(sub2?.replay ?? []), ...again]).toEqual([
      "one",
      "two",
      "three",
      SUCCESS_LINE,
      DONE_LINE,
    ]);
  });

  it("evicts a finished job exactly when the retention period has passed", async () => {
    const clock = new FakeClock();
    const jobs = manager(clock);
    const g = gated();
    const id = jobs.start("j", g.body);
    await clock.advance(10_000_000);
    expect(jobs.state(id)).toBe("running");
    g.finish();
    await tick();
    await clock.advance(599_999);
    expect(jobs.subscribe(id, () => undefined)?.finished).toBe(true);
    await clock.advance(1);
    expect(jobs.state(id)).toBeNull();
    expect(jobs.subscribe(id, () => undefined)).toBeNull();
  });

  it("scrubs the token from every line", async () => {
    const jobs = manager(new FakeClock(), "hf_secret_value");
    const g = gated();
    const id = jobs.start("j", g.body);
    g.ctx().log("url with hf_secret_value inside");
    g.finish(new Error("denied for hf_secret_value\nsecond line"));
    await tick();
    const text = jobs.subscribe(id, () => undefined)?.replay.join("\n") ?? "";
    expect(text).not.toContain("hf_secret_value");
    expect(text).toContain("[error]: denied for [redacted] second line");
  });

  it("cancels running jobs on stop and records why", async () => {
    const jobs = manager();
    const id = jobs.start(
      "j",
      (ctx) =>
        new Promise((_, reject) =>
          ctx.signal.addEventListener("abort", () => reject(new Error("aborted"))),
        ),
    );
    await jobs.stop();
    expect(jobs.subscribe(id, () => undefined)?.replay).toEqual([
      "[error]: job cancelled: the publisher is shutting down",
      DONE_LINE,
    ]);
    expect(() => jobs.start("k", gated().body)).toThrow(/shutting down/);
  });

  it("runs at most one job per key: a second start under a running key is a conflict", async () => {
    const jobs = manager();
    const a = gated();
    const others = [gated(), gated(), gated()] as const;
    const id = jobs.start("a/b -> c/d", a.body, "c/d");
    expect(jobs.runningWithKey("c/d")).toEqual({ id, label: "a/b -> c/d" });
    let err: unknown;
    try {
      jobs.start("x/y -> c/d", others[0].body, "c/d");
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(PublisherError);
    expect((err as PublisherError).code).toBe("conflict");
    expect((err as PublisherError).extra).toEqual({ job_id: id });
    expect(jobs.start("a/b -> e/f", others[1].body, "e/f")).not.toBe(id);
    a.finish();
    await tick();
    expect(jobs.runningWithKey("c/d")).toBeNull();
    jobs.start("x/y -> c/d", others[2].body, "c/d");
    for (const g of others) g.finish();
    await jobs.stop();
  });
});
