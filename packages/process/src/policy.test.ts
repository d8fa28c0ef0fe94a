import { describe, expect, it } from "vitest";
import { DEADLINE_REASON, nextAction } from "./policy.ts";
import type { NextAction, RestartPolicy, RunHistory, RunOutcome } from "./policy.ts";

const runner: RestartPolicy = {
  backoffMs: 1000,
  maxBackoffMs: 30_000,
  healthyUptimeMs: 60_000,
  maxCrashes: 5,
  onDeadline: "fail",
  firstRunMustBeReady: false,
};
const nats: RestartPolicy = {
  backoffMs: 250,
  maxBackoffMs: 5000,
  healthyUptimeMs: 30_000,
  maxCrashes: Infinity,
  onDeadline: "restart",
  firstRunMustBeReady: true,
};
const crashed = (code = 1): RunOutcome => ({ kind: "crashed", code, signal: undefined });
const exited = (uptimeMs: number): RunOutcome => ({
  kind: "exited",
  code: undefined,
  signal: "SIGKILL",
  uptimeMs,
});
const h = (crashes: number, everReady = true): RunHistory => ({ crashes, everReady });
const half = () => 0.5;

describe("nextAction", () => {
  const rows: [string, RunOutcome, RunHistory, RestartPolicy, () => number, NextAction][] = [
    [
      "a requested stop never restarts",
      { kind: "stopped" },
      h(3),
      runner,
      half,
      { action: "none" },
    ],
    [
      "the first crash waits the base backoff",
      crashed(),
      h(0),
      runner,
      half,
      { action: "restart", delayMs: 1000, crashes: 1 },
    ],
    [
      "each crash in a row doubles it",
      crashed(),
      h(2),
      runner,
      half,
      { action: "restart", delayMs: 4000, crashes: 3 },
    ],
    [
      "jitter takes 20% off at the low end",
      crashed(),
      h(0),
      runner,
      () => 0,
      { action: "restart", delayMs: 800, crashes: 1 },
    ],
    [
      "and adds 20% at the high end",
      crashed(),
      h(0),
      runner,
      () => 1,
      { action: "restart", delayMs: 1200, crashes: 1 },
    ],
    [
      "an exit after a stable run resets the series",
      exited(120_000),
      h(4),
      runner,
      half,
      { action: "restart", delayMs: 1000, crashes: 1 },
    ],
    [
      "an exit soon after readiness counts as a crash",
      exited(10),
      h(1),
      runner,
      half,
      { action: "restart", delayMs: 2000, crashes: 2 },
    ],
    [
      "the delay is capped",
      crashed(),
      h(30),
      nats,
      half,
      { action: "restart", delayMs: 5000, crashes: 31 },
    ],
    [
      "an endless series stays capped",
      crashed(),
      h(5000),
      nats,
      half,
      { action: "restart", delayMs: 5000, crashes: 5001 },
    ],
    [
      "a zero backoff restarts at once",
      crashed(),
      h(2000),
      { ...nats, backoffMs: 0 },
      half,
      { action: "restart", delayMs: 0, crashes: 2001 },
    ],
    [
      "too many crashes in a row fail",
      crashed(139),
      h(5),
      runner,
      half,
      { action: "fail", reason: "crashed 5 times in a row (last exit code 139, signal none)" },
    ],
    [
      "a runner's missed deadline is final",
      { kind: "deadline" },
      h(0),
      runner,
      half,
      { action: "fail", reason: DEADLINE_REASON },
    ],
    [
      "nats-server's missed deadline after a ready run is a crash",
      { kind: "deadline" },
      h(1),
      nats,
      half,
      { action: "restart", delayMs: 500, crashes: 2 },
    ],
    [
      "a first run that must be ready fails on a crash",
      crashed(1),
      h(0, false),
      nats,
      half,
      { action: "fail", reason: "exited before it became ready (last exit code 1, signal none)" },
    ],
    [
      "and on a missed deadline",
      { kind: "deadline" },
      h(0, false),
      nats,
      half,
      { action: "fail", reason: DEADLINE_REASON },
    ],
    [
      "once it has been ready, a crash during a restart is retried",
      crashed(1),
      h(1, true),
      nats,
      half,
      { action: "restart", delayMs: 500, crashes: 2 },
    ],
    [
      "a program that cannot start says why",
      { kind: "crashed", code: undefined, signal: undefined, error: "spawn x ENOENT" },
      h(0, false),
      nats,
      half,
      { action: "fail", reason: "exited before it became ready (could not start: spawn x ENOENT)" },
    ],
  ];
  it.each(rows)("%s", (_name, outcome, history, policy, random, want) => {
    expect(nextAction(outcome, history, policy, random)).toEqual(want);
  });
});
