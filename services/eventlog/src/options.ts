// The event log's vocabulary: its config section, what it is built with, a read's query and the
// usage it reports (GET /events, the node's storage report).
import type { Logger } from "@ic/log";
import type { Clock } from "@ic/protocol";
import type { Disk, EventFiles } from "./disk.ts";
import type { Mode } from "./policy.ts";

/** The `event_log` section of the node config (dir already `~`-expanded). */
export interface EventLogConfig {
  readonly dir: string;
  readonly compact_above_mb: number;
  readonly keep_events: number;
  readonly archive_total_mb: number;
  readonly free_floor_gb: number;
  readonly check_every: number;
  /** How long an accepted record may wait in memory for others to share its write (0: at once). */
  readonly write_delay_ms: number;
}

export interface EventLogDeps {
  readonly config: EventLogConfig;
  readonly logger: Logger;
  readonly disk?: Disk;
  readonly clock?: Pick<Clock, "now">;
  /** Opens the active file for appending; tests inject failures (ENOSPC) here. */
  readonly files?: EventFiles;
  /** Records held in memory while the disk is busy; beyond it the oldest are dropped. Default 100000. */
  readonly maxPending?: number;
}

export const READ_LIMIT_DEFAULT = 200;
export const READ_LIMIT_MAX = 5000;

export interface ReadQuery {
  /** 1..5000, default 200. */
  readonly limit?: number | undefined;
  /** Only records with a larger seq. */
  readonly after_seq?: number | undefined;
  /** Only records of this event type. */
  readonly type?: string | undefined;
}

export interface EventLogUsage {
  readonly mode: Mode;
  readonly active_bytes: number;
  readonly archive_bytes: number;
  readonly archive_files: number;
  readonly records_written: number;
  readonly records_counted_only: number;
  /** Counted-only records per event type. */
  readonly counted_by_type: Readonly<Record<string, number>>;
  /** Records lost without being counted by type: non-space write errors, memory overflow, after stop. */
  readonly records_dropped: number;
  readonly last_free_check: { readonly free_bytes: number; readonly at: number } | null;
}

export type EventLogState = "idle" | "starting" | "running" | "stopping" | "stopped";
