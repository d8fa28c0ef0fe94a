// The storage report's JSON shape: snake_case fields, in_use covering companions, and schema validity.
// The gateway returns this document verbatim from GET /store/storage.
import { describe, expect, it } from "vitest";
import { StorageReportSchema, type ModelId } from "@ic/protocol";
import { buildStorageReport } from "./storage-report.ts";

const entry = (id: string, flags: { inUse?: boolean; companionOfActive?: boolean } = {}) => ({
  modelId: id as ModelId,
  path: `/s/${id.replace("/", "--")}`,
  bytes: 1000,
  lastUsedMs: Date.UTC(2025, 0, 2, 3, 4, 5),
  complete: true,
  downloading: false,
  inUse: flags.inUse ?? false,
  companionOfActive: flags.companionOfActive ?? false,
});

describe("buildStorageReport", () => {
  const report = buildStorageReport({
    nodeCachePath: "/s",
    entries: [
      entry("a/idle"),
      entry("a/live", { inUse: true }),
      entry("a/comp", { companionOfActive: true }),
    ],
    eventLogBytes: 4096,
    volume: { freeBytes: 50, totalBytes: 100 },
    settings: { cleanupOnDeactivate: true, keepRecentBytes: 40, headroomBytes: 10 },
    nowMs: Date.UTC(2025, 0, 3),
  });

  it("matches the protocol schema", () => {
    expect(StorageReportSchema.safeParse(report).success).toBe(true);
  });

  it("marks models in use when named by a runner or a companion of an active model", () => {
    expect(report.staged_models.map((m) => [m.model_id, m.in_use])).toEqual([
      ["a/idle", false],
      ["a/live", true],
      ["a/comp", true],
    ]);
  });

  it("reports sizes, last use, event-log usage and the models volume", () => {
    expect(report.staged_bytes).toBe(3000);
    expect(report.staged_models[0]?.last_used_at).toBe("2025-01-02T03:04:05.000Z");
    expect(report.event_log_bytes).toBe(4096);
    expect(report.models_volume).toEqual({ path: "/s", free_bytes: 50, total_bytes: 100 });
  });
});
