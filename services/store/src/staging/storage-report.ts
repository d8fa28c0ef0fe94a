// Builds the GET /store/storage document from what the staging client measured: every staged model,
// the event-log usage the caller reports, and space on the models volume. Pure; shape in @ic/protocol.
import type { StorageReport } from "@ic/protocol";
import type { VolumeSpace } from "../disk.ts";

export interface StorageReportInput {
  readonly nodeCachePath: string;
  readonly entries: readonly {
    readonly modelId: StorageReport["staged_models"][number]["model_id"];
    readonly path: string;
    readonly bytes: number;
    readonly lastUsedMs: number;
    readonly complete: boolean;
    readonly downloading: boolean;
    readonly inUse: boolean;
    readonly companionOfActive: boolean;
  }[];
  readonly eventLogBytes: number;
  readonly volume: VolumeSpace;
  readonly settings: {
    readonly cleanupOnDeactivate: boolean;
    readonly keepRecentBytes: number;
    readonly headroomBytes: number;
  };
  readonly nowMs: number;
}

export function buildStorageReport(input: StorageReportInput): StorageReport {
  const staged = input.entries.map((e) => ({
    model_id: e.modelId,
    path: e.path,
    size_bytes: e.bytes,
    last_used_at: new Date(e.lastUsedMs).toISOString(),
    in_use: e.inUse || e.companionOfActive,
    complete: e.complete,
    downloading: e.downloading,
  }));
  return {
    node_cache_path: input.nodeCachePath,
    staged_models: staged,
    staged_bytes: staged.reduce((s, m) => s + m.size_bytes, 0),
    event_log_bytes: Math.max(0, Math.round(input.eventLogBytes)),
    models_volume: {
      path: input.nodeCachePath,
      free_bytes: input.volume.freeBytes,
      total_bytes: input.volume.totalBytes,
    },
    staging: {
      cleanup_on_deactivate: input.settings.cleanupOnDeactivate,
      staging_keep_recent_bytes: input.settings.keepRecentBytes,
      headroom_bytes: input.settings.headroomBytes,
    },
    generated_at: new Date(input.nowMs).toISOString(),
  };
}
