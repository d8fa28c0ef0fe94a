// Pure restart decisions for supervised children: what one run's outcome means for the next run.
// The supervisor loop (supervise.ts) owns the effects; this file owns the arithmetic, tested by tables.
// Invariants: every outcome maps to exactly one action (restart, fail or none); a requested stop never
// restarts; consecutive unhealthy ends count up, an exit after a healthy uptime counts as the first;
// the delay is backoff * 2^(n-1) with +-20% jitter, capped; more than maxCrashes in a row fails.

/** How one run of a child ended. `exited`: it had become ready; `crashed`: it ended before that. */
export type RunOutcome =
  | {
      readonly kind: "exited";
      readonly code: number | undefined;
      readonly signal: string | undefined;
      /** Time from readiness to exit. */
      readonly uptimeMs: number;
    }
  | {
      readonly kind: "crashed";
      readonly code: number | undefined;
      readonly signal: string | undefined;
      /** Set when the process could not be started at all (e.g. the binary is missing). */
      readonly error?: string;
    }
  /** Not ready within its deadline; the supervisor stopped it. */
  | { readonly kind: "deadline" }
  /** The supervisor was asked to stop. */
  | { readonly kind: "stopped" };

export interface RestartPolicy {
  /** Delay before the first restart of a series. */
  readonly backoffMs: number;
  /** The delay never exceeds this. */
  readonly maxBackoffMs: number;
  /** A run that stayed up this long after becoming ready resets the series. */
  readonly healthyUptimeMs: number;
  /** Unhealthy ends in a row after which the child is declared failed (Infinity: never). */
  readonly maxCrashes: number;
  /** A missed readiness deadline: give up (runners: a wedged GPU), or count it as a crash. */
  readonly onDeadline: "fail" | "restart";
  /** A child that never became ready is not retried (its owner's start() fails instead). */
  readonly firstRunMustBeReady: boolean;
}

/** What the loop remembers between runs. */
export interface RunHistory {
  /** Unhealthy ends in a row so far. */
  readonly crashes: number;
  /** Whether any run has become ready. */
  readonly everReady: boolean;
}

export type NextAction =
  | { readonly action: "restart"; readonly delayMs: number; readonly crashes: number }
  | { readonly action: "fail"; readonly reason: string }
  | { readonly action: "none" };

export const DEADLINE_REASON = "warmup exceeded its deadline";

/** Pure: what to do after a run ended. `random` in [0, 1) drives the jitter. */
export function nextAction(
  outcome: RunOutcome,
  history: RunHistory,
  policy: RestartPolicy,
  random: () => number = Math.random,
): NextAction {
  if (outcome.kind === "stopped") return { action: "none" };
  const firstFailed = policy.firstRunMustBeReady && !history.everReady;
  if (outcome.kind === "deadline" && (policy.onDeadline === "fail" || firstFailed))
    return { action: "fail", reason: DEADLINE_REASON };
  if (outcome.kind === "crashed" && firstFailed)
    return { action: "fail", reason: `exited before it became ready (${exitText(outcome)})` };
  const healthy = outcome.kind === "exited" && outcome.uptimeMs >= policy.healthyUptimeMs;
  const n = healthy ? 1 : history.crashes + 1;
  if (n > policy.maxCrashes) {
    return {
      action: "fail",
      reason: `crashed ${n - 1} times in a row (${outcome.kind === "deadline" ? "last one missed its deadline" : exitText(outcome)})`,
    };
  }
  // The exponent is capped so a zero backoff or an endless series never computes 0 * Infinity.
  const base = policy.backoffMs * 2 ** Math.min(n - 1, 30);
  const delayMs = Math.min(policy.maxBackoffMs, Math.round(base * (0.8 + 0.4 * random())));
  return { action: "restart", delayMs, crashes: n };
}

function exitText(o: {
  readonly code: number | undefined;
  readonly signal: string | undefined;
  readonly error?: string;
}): string {
  if (o.error) return `could not start: ${o.error}`;
  return `last exit code ${o.code ?? "none"}, signal ${o.signal ?? "none"}`;
}
