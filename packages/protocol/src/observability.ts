// Observability shapes: a runner's log read across the bus (the holding node's answer), and the body
// of GET /v1/diagnostics/telemetry (one node's telemetry-plane pressure: admission, coalescing, drops,
// queue and publish latency of the samples its heartbeats carry).
import { z } from "zod";
import { WireErrorSchema } from "./errors.ts";

/**
 * An instance id as a runner log file takes it (`<instance>-rank<n>.log`): letters, digits, `_` and
 * `-` only, so a requested id can never name a path outside the runner log directory.
 */
export const LOG_INSTANCE_ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;
export const RUNNER_LOG_MAX_RANK = 1023;
/** Most lines one runner-log read returns. */
export const RUNNER_LOG_MAX_LINES = 5000;
/** Most bytes of a log file's end one read looks at (the reply stays far below the bus payload limit). */
export const RUNNER_LOG_MAX_BYTES = 256 * 1024;

export const RunnerLogRequestSchema = z
  .object({
    instance_id: z.string().regex(LOG_INSTANCE_ID),
    rank: z.number().int().min(0).max(RUNNER_LOG_MAX_RANK),
    tail: z.number().int().min(1).max(RUNNER_LOG_MAX_LINES),
    max_bytes: z.number().int().min(1).max(RUNNER_LOG_MAX_BYTES),
  })
  .strict();
export type RunnerLogRequest = z.infer<typeof RunnerLogRequestSchema>;

export const RunnerLogReplySchema = z.object({
  peer_key: z.string(),
  name: z.string(),
  ok: z.boolean(),
  /** The file on the holding node (`<engine.runner_log_dir>/<instance>-rank<n>.log`). */
  file: z.string(),
  size_bytes: z.number().int().nonnegative(),
  modified_at: z.string().nullable(),
  /** True when the file holds more than the lines returned. */
  truncated: z.boolean(),
  lines: z.array(z.string()),
  error: WireErrorSchema.optional(),
});
export type RunnerLogReply = z.infer<typeof RunnerLogReplySchema>;

const LatencySchema = z.object({
  /** Samples in the window the percentiles are taken over (the most recent ones). */
  count: z.number().int().nonnegative(),
  p50_ms: z.number().nonnegative().nullable(),
  p99_ms: z.number().nonnegative().nullable(),
  /** Largest in the window. */
  max_ms: z.number().nonnegative().nullable(),
  /** Largest since the node started. */
  max_ever_ms: z.number().nonnegative().nullable(),
});

export const TelemetryKindStatsSchema = z.object({
  offered: z.number().int().nonnegative(),
  admitted: z.number().int().nonnegative(),
  rejected: z.number().int().nonnegative(),
  coalesced: z.number().int().nonnegative(),
  dropped: z.number().int().nonnegative(),
  published: z.number().int().nonnegative(),
  pending: z.boolean(),
  last_admitted_at: z.number().nullable(),
  last_published_at: z.number().nullable(),
});

export const TelemetryDiagnosticsSchema = z.object({
  node: z.string(),
  peer_key: z.string(),
  generated_at: z.number(),
  heartbeat_ms: z.number().positive(),
  admission: z.object({
    offered: z.number().int().nonnegative(),
    admitted: z.number().int().nonnegative(),
    rejected: z.object({
      /** Older than the sample already pending or published for its kind. */
      stale: z.number().int().nonnegative(),
      /** Offered after the telemetry path stopped. */
      stopped: z.number().int().nonnegative(),
    }),
  }),
  coalescing: z.object({
    /** Pending samples replaced by a newer one of the same kind before a heartbeat sent them. */
    coalesced: z.number().int().nonnegative(),
  }),
  drops: z.object({
    total: z.number().int().nonnegative(),
    /** The queue was full: the oldest pending sample went. */
    overflow: z.number().int().nonnegative(),
    /** Sent in a heartbeat that never came back over the bus in time (bus down, publish lost). */
    unconfirmed: z.number().int().nonnegative(),
    /** Pending or in flight when the path stopped. */
    stopped: z.number().int().nonnegative(),
  }),
  queue: z.object({
    capacity: z.number().int().positive(),
    depth: z.number().int().nonnegative(),
    max_depth: z.number().int().nonnegative(),
    /** Taken into a heartbeat, not yet seen back on the bus. */
    in_flight: z.number().int().nonnegative(),
    max_in_flight: z.number().int().positive(),
    oldest_pending_age_ms: z.number().nonnegative().nullable(),
  }),
  publish: z.object({
    published: z.number().int().nonnegative(),
    /** Heartbeats that took at least one sample. */
    heartbeats: z.number().int().nonnegative(),
    /** This node's heartbeats seen back on the bus. */
    confirmed_heartbeats: z.number().int().nonnegative(),
    last_published_at: z.number().nullable(),
    /** Admission to the heartbeat that took the sample. */
    queue_wait: LatencySchema,
    /** Admission to the heartbeat carrying it coming back over the bus. */
    latency: LatencySchema,
  }),
  readings: z.object({
    completed: z.number().int().nonnegative(),
    failed: z.number().int().nonnegative(),
    /** Periods skipped because the previous reading was still running (a slow nvidia-smi). */
    skipped_busy: z.number().int().nonnegative(),
    last_duration_ms: z.number().nonnegative().nullable(),
    max_duration_ms: z.number().nonnegative().nullable(),
  }),
  kinds: z.record(z.string(), TelemetryKindStatsSchema),
});
export type TelemetryDiagnostics = z.infer<typeof TelemetryDiagnosticsSchema>;
