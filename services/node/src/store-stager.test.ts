// The node's adapter over the staging client: stages that ask at once share one client (each client
// owns a transfer queue and its own list of what is downloading over the same root), and a failed
// stage is reported to the master as DownloadFailed and thrown as a typed, retryable error.
import { afterEach, describe, expect, it, vi } from "vitest";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { silentLogger } from "@ic/log";
import { emptyState, ServiceError } from "@ic/protocol";
import type { Command, ModelId, ModelRecord } from "@ic/protocol";
import { StagingClient } from "@ic/store";
import type { ClusterPort } from "@ic/worker";
import { StoreStager } from "./store-stager.ts";

const record = (id: string, storeUrl: string): ModelRecord => ({
  model_id: id as ModelId,
  file: "m.gguf",
  bytes: 1000,
  architecture: "llama",
  layers: 2,
  context_length: 256,
  embedding_length: 64,
  head_count: 4,
  head_count_kv: 4,
  supports_tensor: true,
  store_url: storeUrl,
});

const dirs: string[] = [];
afterEach(async () => {
  vi.restoreAllMocks();
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

describe("StoreStager", () => {
  it("gives stages that ask at once one staging client, and reports each failure to the master", async () => {
    const root = await mkdtemp(join(tmpdir(), "ic-stager-"));
    dirs.push(root);
    const commands: Command[] = [];
    const cluster: ClusterPort = {
      peerKey: "p",
      synced: true,
      nodeId: null,
      snapshot: () => emptyState(),
      command: (cmd) => {
        commands.push(cmd);
        return Promise.resolve({ ok: true });
      },
      on: () => () => undefined,
    };
    const starts = vi.spyOn(StagingClient.prototype, "start");
    await using stager = new StoreStager({
      root,
      settings: { cleanupOnDeactivate: false, keepRecentBytes: 0, headroomBytes: 0 },
      log: silentLogger(),
      cluster,
    });
    await stager.start();
    expect(starts).toHaveBeenCalledTimes(1);
    // A store URL nothing listens on: every stage fails fast, after its client was made.
    const store = "http://127.0.0.1:9";
    const abort = new AbortController();
    const outcomes = await Promise.allSettled(
      ["a/one", "a/two", "a/three"].map((id) => stager.stage(record(id, store), abort.signal)),
    );
    // The start's client (no store URL) and one for the store URL: not one per stage.
    expect(starts).toHaveBeenCalledTimes(2);
    for (const o of outcomes) {
      expect(o.status).toBe("rejected");
      const e = (o as PromiseRejectedResult).reason as ServiceError;
      expect(e).toBeInstanceOf(ServiceError);
      expect(e.code).toBe("download_failed");
    }
    expect(commands.map((c) => c.type)).toEqual([
      "ReportDownloadFailed",
      "ReportDownloadFailed",
      "ReportDownloadFailed",
    ]);
  });
});
