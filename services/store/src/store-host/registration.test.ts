// Registering the store's models with a scripted master: one refusal never holds the others, is
// reported with the master's words and logged at warn once; passes never overlap.
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { writeTinyModel } from "@ic/gguf";
import {
  modelDirName,
  ServiceError,
  type Command,
  type ModelId,
  type NodeId,
  type SessionId,
  type StoreManifest,
} from "@ic/protocol";
import { collectingLogger, tempDir } from "../test-support.ts";
import { Registration } from "./registration.ts";

const ids = ["acme/a", "acme/bad", "acme/c"] as ModelId[];

async function store(path: string): Promise<StoreManifest[]> {
  const out: StoreManifest[] = [];
  for (const id of ids) {
    await mkdir(join(path, modelDirName(id)));
    const t = await writeTinyModel(join(path, modelDirName(id), "m.gguf"));
    out.push({
      model_id: id,
      files: [{ path: "m.gguf", bytes: t.bytes, sha256: "0".repeat(64) }],
      total_bytes: t.bytes,
      registered_at: new Date(0).toISOString(),
      source: "local",
    });
  }
  return out;
}

/** A master that refuses `acme/bad` (or fails as told) and records what it registered. */
function master(
  fail: (id: string) => Error | undefined = (id) =>
    id === "acme/bad" ? new ServiceError("invalid_request", "acme/bad has no layers") : undefined,
) {
  const registered: string[] = [];
  const cluster = {
    synced: true,
    sessionId: "s-1" as SessionId,
    nodeId: "n-1" as NodeId,
    command: async (cmd: Command) => {
      if (cmd.type !== "RegisterModel") throw new Error(`unexpected ${cmd.type}`);
      const e = fail(cmd.model.model_id);
      if (e) throw e;
      registered.push(cmd.model.model_id);
      return { ok: true as const, index: 1 };
    },
  };
  return { cluster, registered };
}

describe("Registration", () => {
  it("registers the other models when the master refuses one, and reports that one once", async () => {
    await using dir = await tempDir("ic-reg");
    const manifests = await store(dir.path);
    const { cluster, registered } = master();
    const logs = collectingLogger();
    let now = 0;
    let version = 0;
    const r = new Registration({
      cluster,
      host: { models: () => manifests, modelPath: (id) => join(dir.path, modelDirName(id)) },
      apiUrl: "http://store:1",
      log: logs.log,
      version: () => version,
      now: () => now,
    });
    await r.pass();
    expect(registered).toEqual(["acme/a", "acme/c"]);
    expect(r.refusals()).toEqual(
      new Map([["acme/bad", "the master refused it: acme/bad has no layers"]]),
    );
    // Nothing changed: no pass sends anything again before the refusal's retry time.
    for (let i = 0; i < 5; i++) await r.pass();
    expect(registered).toEqual(["acme/a", "acme/c"]);
    now += 30_000;
    await r.pass();
    version++;
    await r.pass();
    expect(registered).toEqual(["acme/a", "acme/c", "acme/a", "acme/c"]);
    expect(logs.messages("warn")).toEqual(["store model not registered"]);
  });

  it("retries at the next pass what failed for want of a master, without reporting it", async () => {
    await using dir = await tempDir("ic-reg");
    const manifests = await store(dir.path);
    let down = true;
    const { cluster, registered } = master(() =>
      down ? new ServiceError("no_master", "the master did not answer") : undefined,
    );
    const r = new Registration({
      cluster,
      host: { models: () => manifests, modelPath: (id) => join(dir.path, modelDirName(id)) },
      apiUrl: "http://store:1",
      log: collectingLogger().log,
      version: () => 0,
    });
    await r.pass();
    expect(registered).toEqual([]);
    expect(r.refusals().size).toBe(0);
    down = false;
    await r.pass();
    expect(registered).toEqual(ids);
  });

  it("never runs two passes at once, however slow the master", async () => {
    await using dir = await tempDir("ic-reg");
    const manifests = await store(dir.path);
    let inFlight = 0;
    let most = 0;
    let calls = 0;
    let version = 0;
    const cluster = {
      ...master().cluster,
      command: async () => {
        calls++;
        version++;
        most = Math.max(most, ++inFlight);
        await new Promise((res) => setTimeout(res, 30));
        inFlight--;
        return { ok: true as const, index: 1 };
      },
    };
    const r = new Registration({
      cluster,
      host: { models: () => manifests, modelPath: (id) => join(dir.path, modelDirName(id)) },
      apiUrl: "http://store:1",
      log: collectingLogger().log,
      // Every command bumps the version: each pass has all to send again.
      version: () => version,
      everyMs: 1,
    });
    r.start();
    await new Promise((res) => setTimeout(res, 400));
    await r.stop();
    expect(calls).toBeGreaterThan(3);
    expect(most).toBe(1);
  });
});
