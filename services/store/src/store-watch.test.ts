import { mkdir, mkdtemp, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import type { ModelId } from "@ic/protocol";
import { settled, StoreWatch } from "./store-watch.ts";
import type { DirSnapshot } from "./store-watch.ts";

const snap = (o: Partial<DirSnapshot> = {}): DirSnapshot => ({
  signature: "w.gguf:10:1000",
  newestMtimeMs: 1000,
  files: 1,
  hasDownloadRecord: false,
  ...o,
});

describe("settled", () => {
  it.each([
    ["the same files, old enough", snap(), snap(), 5000, true],
    ["first sight", undefined, snap(), 5000, false],
    ["a file grew", snap(), snap({ signature: "w.gguf:20:1000" }), 5000, false],
    ["written too recently", snap(), snap(), 3500, false],
    ["a pull's record is there", snap(), snap({ hasDownloadRecord: true }), 5000, false],
    ["no files", snap({ files: 0, signature: "" }), snap({ files: 0, signature: "" }), 5000, false],
  ])("%s -> %s", (_, prev, cur, now, want) => {
    expect(settled(prev, cur, now, 3000)).toBe(want);
  });
});

describe("StoreWatch", () => {
  it("registers a copied directory once it stops changing, and never one with a pull's record", async () => {
    const store = await mkdtemp(join(tmpdir(), "ic-watch-"));
    try {
      let now = Date.now() + 60_000;
      const registered = new Set<string>();
      const added: string[] = [];
      const w = new StoreWatch({
        storePath: store,
        registered: (id) => registered.has(id),
        register: async (id: ModelId) => void registered.add(id),
        onAdded: (id) => added.push(id),
        log: silentLogger(),
        settleMs: 3000,
        now: () => now,
      });
      await mkdir(join(store, "acme--copied"));
      await mkdir(join(store, "acme--pulling"));
      await mkdir(join(store, "not-a-model"));
      await writeFile(join(store, "acme--copied", "w.gguf"), "half");
      await writeFile(join(store, "acme--pulling", "done.bin"), "x");
      await writeFile(join(store, "acme--pulling", ".ic-download.json"), "{}");
      await w.scanOnce();
      expect(added).toEqual([]);
      // Still being copied: the file grew since the last scan.
      await writeFile(join(store, "acme--copied", "w.gguf"), "whole file");
      const old = new Date(Date.now() - 10_000);
      await utimes(join(store, "acme--copied", "w.gguf"), old, old);
      now += 5000;
      await w.scanOnce();
      expect(added).toEqual([]);
      now += 5000;
      await w.scanOnce();
      expect(added).toEqual(["acme/copied"]);
      now += 5000;
      await w.scanOnce();
      expect(added).toEqual(["acme/copied"]);
    } finally {
      await rm(store, { recursive: true, force: true });
    }
  });
});
