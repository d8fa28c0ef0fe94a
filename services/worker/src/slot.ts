// One runner slot of this node (an instance's rank placed here): what the worker knows of it, how a
// status from its supervisor changes it, and what it reports (the Runner record, health entries).
import type { HealthEntry, Instance, Runner, RunnerState } from "@ic/protocol";
import type { RunnerSupervisor } from "./runner.ts";

export interface Slot {
  readonly key: string;
  readonly instance: Instance;
  readonly rank: number;
  readonly abort: AbortController;
  supervisor?: RunnerSupervisor;
  state: RunnerState;
  reason?: string;
  endpoint?: string;
  restarts: number;
  /** rank 0 of a multi-node instance: the rpc endpoints it was started with. */
  rpc?: string;
  /** rank 0 while staging: bytes on disk so far (reported with RunnerStaging). */
  progress?: NonNullable<Runner["progress"]>;
  /** When the current warmup (process start or wait for remote ranks) began. */
  warmupStartedAt?: number;
  /** When staging progress was last reported (at most one report a second per runner). */
  progressReportedAt: number;
  /** The engine's last error line while it crash-loops or after it failed. */
  lastError?: string;
  /**
   * rank 0 whose engine saves and restores slots (kv-move.ts): its slot directory and the size of
   * the model file it loaded (a saved cache names both).
   */
  kv?: { readonly dir: string; readonly modelBytes: number };
}

/** Restarts in a row (without becoming ready) from which a runner counts as crash-looping. */
const CRASH_LOOP_RESTARTS = 2;

/** A runner's status as its supervisor (or the worker) tells it. */
export interface SlotStatus {
  readonly state: RunnerState;
  readonly reason?: string | undefined;
  readonly endpoint?: string | undefined;
  readonly restarts: number;
  readonly lastError?: string | undefined;
}

/**
 * Takes a status into the slot. A new warmup (first, after a restart, or after waiting for remote
 * ranks) restarts its clock; staging progress lasts while the runner stages.
 */
export function applyStatus(slot: Slot, s: SlotStatus, now: number): void {
  if (s.state !== "RunnerWarmingUp") slot.warmupStartedAt = undefined;
  else if (
    slot.warmupStartedAt === undefined ||
    slot.state !== "RunnerWarmingUp" ||
    slot.reason !== s.reason ||
    slot.restarts !== s.restarts
  )
    slot.warmupStartedAt = now;
  if (s.state !== "RunnerStaging") slot.progress = undefined;
  slot.state = s.state;
  slot.reason = s.reason;
  slot.endpoint = s.state === "RunnerReady" ? s.endpoint : undefined;
  slot.restarts = s.restarts;
  slot.lastError = s.state === "RunnerReady" ? undefined : (s.lastError ?? slot.lastError);
}

/** The Runner record the master is told of a slot on node `nodeId`. */
export function runnerOf(slot: Slot, nodeId: Runner["node_id"], now: number): Runner {
  return {
    instance_id: slot.instance.instance_id,
    node_id: nodeId,
    rank: slot.rank,
    state: slot.state,
    ...(slot.reason ? { reason: slot.reason } : {}),
    ...(slot.endpoint ? { endpoint: slot.endpoint } : {}),
    restarts: slot.restarts,
    since: now,
    ...(slot.lastError ? { last_error: slot.lastError.slice(0, 400) } : {}),
    ...(slot.state === "RunnerStaging" && slot.progress ? { progress: slot.progress } : {}),
    ...(slot.state === "RunnerWarmingUp" && slot.warmupStartedAt !== undefined
      ? { warmup_started_at: slot.warmupStartedAt }
      : {}),
  };
}

/**
 * The slots that fail, as nodeHealth entries: one that gave up (runner_failed) or keeps crashing
 * (runner_crash_loop), with its model, instance and the engine's last error line.
 */
export function slotHealth(slots: Iterable<Slot>): HealthEntry[] {
  const out: HealthEntry[] = [];
  for (const s of slots) {
    const failed = s.state === "RunnerFailed";
    if (!failed && !(s.state !== "RunnerReady" && s.restarts >= CRASH_LOOP_RESTARTS)) continue;
    const what = `${s.instance.model_id} (instance ${s.instance.instance_id}, rank ${s.rank})`;
    const said = s.lastError ? `: ${s.lastError}` : "";
    out.push({
      code: failed ? "runner_failed" : "runner_crash_loop",
      severity: "warn",
      message: failed
        ? `the runner of ${what} gave up after ${s.restarts} restarts (${s.reason ?? "failed"})${said}`
        : `the runner of ${what} crashed ${s.restarts} times in a row${said}`,
      remediation:
        "read the engine's words above and the runner log (GET /instances/{id}/logs); a model that fails to load is placed on another node and given up when it fails everywhere; fix or replace the model and place it again",
      model_id: s.instance.model_id,
      instance_id: s.instance.instance_id,
    });
  }
  return out;
}

/** Progress of a staging that starts now: nothing on disk yet out of the model's bytes. */
export function stagingStart(totalBytes: number, now: number): NonNullable<Runner["progress"]> {
  return { staged_bytes: 0, total_bytes: totalBytes, started_at: now };
}

/**
 * The runner's `-c`: what placement chose for the instance (its memory was counted at it); for an
 * instance placed before placement recorded one, the configured context (4096 when unset) capped by
 * the model's trained context. Pure.
 */
export function runnerContext(
  placed: number | undefined,
  configured: number | undefined,
  trained: number,
): number {
  if (placed !== undefined) return placed;
  const c = configured ?? 4096;
  return trained > 0 ? Math.min(c, trained) : c;
}
