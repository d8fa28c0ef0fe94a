// The store host component with a scripted master: its models reach the cluster within 2 s although a
// big one hashes, and its heartbeat reports the hash (info), a changed model and a refused one (warn).
import { mkdir, truncate } from "node:fs/promises";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { describe, expect, it } from "vitest";
import type { Bus } from "@ic/bus";
import { writeTinyModel } from "@ic/gguf";
import { silentLogger } from "@ic/log";
import {
  GiB,
  modelDirName,
  ServiceError,
  type Command,
  type ModelId,
  type NodeId,
  type SessionId,
} from "@ic/protocol";
import { tempDir } from "../test-support.ts";
import { storeHostComponent } from "./component.ts";
import { writeManifest } from "./manifests.ts";

async function model(store: string, name: string, o: { bytes?: number; manifest?: boolean }) {
  const dir = join(store, modelDirName(name as ModelId));
  await mkdir(dir, { recursive: true });
  const file = join(dir, "m.gguf");
  await writeTinyModel(file);
  if (o.manifest)
    await writeManifest({
      dir,
      modelId: name as ModelId,
      source: "local",
      known: new Map(),
      revision: undefined,
      nowMs: 0,
      log: silentLogger(),
    });
  if (o.bytes !== undefined) await truncate(file, o.bytes);
}

describe("storeHostComponent", () => {
  it("registers its models within 2 s while a big one hashes, and reports what it cannot serve", async () => {
    await using store = await tempDir("ic-store-component");
    await model(store.path, "acme/a", { manifest: true });
    await model(store.path, "acme/bad", { manifest: true });
    await model(store.path, "acme/changed", { manifest: true, bytes: 2 * GiB });
    await model(store.path, "acme/big", { bytes: 20 * GiB });
    const registered: string[] = [];
    const cluster = {
      synced: true,
      sessionId: "s-1" as SessionId,
      nodeId: "n-1" as NodeId,
      command: async (cmd: Command) => {
        if (cmd.type === "RegisterModel") {
          if (cmd.model.model_id === "acme/bad")
            throw new ServiceError("invalid_request", "acme/bad: context_length is 0");
          registered.push(cmd.model.model_id);
        }
        return { ok: true as const, index: 1 };
      },
    };
    const bus = { respond: () => () => undefined } as unknown as Pick<Bus, "respond">;
    const c = storeHostComponent({
      storePath: store.path,
      modelStore: { hub_url: "http://127.0.0.1:9", transfer_idle_timeout_ms: 30_000 },
      settings: { headroomBytes: 0 },
      cluster,
      bus,
      self: { name: "store", apiUrl: "http://127.0.0.1:1" },
      hubToken: undefined,
      log: silentLogger(),
      registerEveryMs: 20,
      settleMs: 50,
    });
    const t0 = performance.now();
    await c.start?.();
    try {
      while (registered.length === 0 && performance.now() - t0 < 2000)
        await new Promise((r) => setTimeout(r, 10));
      expect(registered).toEqual(["acme/a"]);
      expect(performance.now() - t0).toBeLessThan(2000);
      // The big directory has no manifest: the watch admits it once settled, and it hashes.
      while ((c.host.hashing()[0]?.done_bytes ?? 0) === 0 && performance.now() - t0 < 5000)
        await new Promise((r) => setTimeout(r, 10));
      const health = c.heartbeat!().health ?? [];
      expect(health.map((h) => [h.code, h.severity, h.model_id])).toEqual([
        ["store_model_changed", "warn", "acme/changed"],
        ["store_model_refused", "warn", "acme/bad"],
        ["store_hashing", "info", "acme/big"],
      ]);
      expect(health[1]!.message).toContain("acme/bad: context_length is 0");
      expect(c.host.hashing()[0]!.done_bytes).toBeGreaterThan(0);
    } finally {
      const t1 = performance.now();
      await c.stop?.();
      expect(performance.now() - t1).toBeLessThan(2000);
    }
  });
});
