// The one supervisor loop for every child process of a node (nats-server, runners): run once, classify
// the outcome, decide (policy.ts), wait a jittered backoff, all under one AbortSignal.
// Invariants: at most one child at a time -- a run ends only after its child has exited; each run
// ends in exactly one outcome and each outcome leads to exactly one decision, so a death restarts at
// most once; the owner's hooks see spawn, ready and outcome in that order, once per run; after the
// signal aborts, the child is stopped (SIGTERM, then SIGKILL after the grace) and nothing is spawned
// again; the loop's promise resolves (never rejects, unless a hook throws) when supervision is over.
import { nextAction } from "./policy.ts";
import type { NextAction, RestartPolicy, RunHistory, RunOutcome } from "./policy.ts";
import { systemClock } from "@ic/protocol";
import type { Clock } from "@ic/protocol";
import { spawnChild } from "./spawn.ts";
import type { Child, ChildExit, Command } from "./spawn.ts";

/** The supervisor reads the time and sleeps; tests pass a FakeClock. */
type LoopClock = Pick<Clock, "now" | "sleep">;

export interface SuperviseOptions {
  /** Ends supervision: the running child is stopped and the loop returns. */
  readonly signal: AbortSignal;
  /** The command of the next run (called once per run, just before it is spawned). */
  readonly command: () => Command;
  /** Whether the child is ready (polled every readyPollMs until it is, exits, or the deadline). */
  readonly ready: (child: Child) => Promise<boolean>;
  readonly readyPollMs: number;
  readonly readyDeadlineMs: number;
  readonly policy: RestartPolicy;
  /** Between SIGTERM and SIGKILL when the loop stops a child. */
  readonly stopGraceMs: number;
  /** Directory children are recorded in for the orphan sweep. */
  readonly recordIn?: string | undefined;
  readonly spawn?: (cmd: Command) => Child;
  readonly clock?: LoopClock;
  readonly random?: () => number;
  readonly onSpawn?: (child: Child, run: number) => void;
  readonly onReady?: (child: Child, info: { run: number; warmupMs: number }) => void;
  /** Awaited before the loop acts on `next` (e.g. to log the child's last output). */
  readonly onOutcome?: (
    outcome: RunOutcome,
    next: NextAction,
    info: { run: number; history: RunHistory },
  ) => Promise<void> | void;
}

export type SuperviseResult =
  | { readonly kind: "stopped" }
  | { readonly kind: "failed"; readonly reason: string; readonly outcome: RunOutcome };

/** Runs `command` until the signal aborts or the policy gives up. */
export async function supervise(o: SuperviseOptions): Promise<SuperviseResult> {
  const clock = o.clock ?? systemClock;
  const random = o.random ?? Math.random;
  const spawn = o.spawn ?? ((cmd: Command) => spawnChild(cmd, { recordIn: o.recordIn }));
  let history: RunHistory = { crashes: 0, everReady: false };
  for (let run = 0; ; run++) {
    if (o.signal.aborted) return { kind: "stopped" };
    const outcome = await runOnce(o, spawn, clock, run);
    if (outcome.kind === "exited") history = { ...history, everReady: true };
    const next = nextAction(outcome, history, o.policy, random);
    if (next.action === "restart") history = { ...history, crashes: next.crashes };
    await o.onOutcome?.(outcome, next, { run, history });
    if (next.action === "none") return { kind: "stopped" };
    if (next.action === "fail") return { kind: "failed", reason: next.reason, outcome };
    await clock.sleep(next.delayMs, o.signal);
  }
}

/** One run: spawn, wait for readiness (or exit, deadline, stop), then for the exit (or stop). */
async function runOnce(
  o: SuperviseOptions,
  spawn: (cmd: Command) => Child,
  clock: LoopClock,
  run: number,
): Promise<RunOutcome> {
  let child: Child;
  try {
    child = spawn(o.command());
  } catch (e) {
    return { kind: "crashed", code: undefined, signal: undefined, error: (e as Error).message };
  }
  o.onSpawn?.(child, run);
  let exit: ChildExit | undefined;
  const exited = child.exited.then((x) => (exit = x));
  let onAbort: () => void = () => {};
  const aborted = new Promise<void>((resolve) => (onAbort = resolve));
  o.signal.addEventListener("abort", onAbort, { once: true });
  try {
    return await watch(o, clock, run, { child, exit: () => exit, exited, aborted });
  } finally {
    o.signal.removeEventListener("abort", onAbort);
  }
}

/**
 * A run's child as the loop watches it: the child, its exit once it has come (undefined before),
 * the promise of that exit, and a promise that settles when the signal aborts.
 */
interface WatchedChild {
  child: Child;
  exit: () => ChildExit | undefined;
  exited: Promise<ChildExit>;
  aborted: Promise<void>;
}

async function watch(
  o: SuperviseOptions,
  clock: LoopClock,
  run: number,
  { child, exit, exited, aborted }: WatchedChild,
): Promise<RunOutcome> {
  const stopped = async (): Promise<RunOutcome> => {
    await child.stop(o.stopGraceMs);
    return { kind: "stopped" };
  };
  const started = clock.now();
  const deadline = started + o.readyDeadlineMs;
  for (;;) {
    if (o.signal.aborted) return stopped();
    const early = exit();
    if (early) return { kind: "crashed", ...early };
    if (clock.now() >= deadline) {
      await child.stop(o.stopGraceMs);
      return { kind: "deadline" };
    }
    if (await o.ready(child).catch(() => false)) break;
    await Promise.race([exited, aborted, clock.sleep(o.readyPollMs, o.signal)]);
  }
  if (o.signal.aborted) return stopped();
  const readyAt = clock.now();
  o.onReady?.(child, { run, warmupMs: readyAt - started });
  await Promise.race([exited, aborted]);
  if (o.signal.aborted) return stopped();
  const { code, signal } = await exited;
  return { kind: "exited", code, signal, uptimeMs: clock.now() - readyAt };
}
