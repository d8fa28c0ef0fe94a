// The store watch's pure decisions (settled, followUpMs, dirAction, looseEntries) by tables, and its
// scans over real directories with a scripted store host (admitting, hashing, reporting changed).
import { mkdir, mkdtemp, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { silentLogger } from "@ic/log";
import type { ModelId } from "@ic/protocol";
import { walkFiles } from "../paths.ts";
import {
  dirAction,
  dirSignature,
  followUpMs,
  looseEntries,
  settled,
  StoreWatch,
} from "./store-watch.ts";
import type { Admission, DirSnapshot } from "./store-watch.ts";

const snap = (o: Partial<DirSnapshot> = {}): DirSnapshot => ({
  signature: "w.gguf:10:1000",
  atMs: 5000,
  newestMtimeMs: 1000,
  files: 1,
  hasDownloadRecord: false,
  ...o,
});

describe("settled", () => {
  it.each([
    ["the same files, seen 3 s apart, old enough", snap({ atMs: 2000 }), snap(), true],
    ["first sight", undefined, snap(), false],
    ["a file grew", snap({ atMs: 2000 }), snap({ signature: "w.gguf:20:1000" }), false],
    ["seen again too soon", snap({ atMs: 4000 }), snap(), false],
    ["written too recently", snap({ atMs: 1000 }), snap({ newestMtimeMs: 3500 }), false],
    ["a pull's record is there", snap({ atMs: 0 }), snap({ hasDownloadRecord: true }), false],
    ["only hidden files", snap({ atMs: 0, files: 0 }), snap({ files: 0 }), false],
  ])("%s -> %s", (_, prev, cur, want) => {
    expect(settled(prev, cur, 3000)).toBe(want);
  });
});

describe("followUpMs", () => {
  it.each([
    ["first sight: a full settle period", undefined, snap(), 3000],
    ["changed since: a full settle period", snap({ signature: "x" }), snap(), 3000],
    ["unchanged, 1 s since the first look", snap({ atMs: 4000 }), snap(), 2000],
    ["unchanged, written 0.5 s ago", snap({ atMs: 0 }), snap({ newestMtimeMs: 4500 }), 2500],
    ["never sooner than 200 ms", snap({ atMs: 2100 }), snap(), 200],
    [
      "a pull's directory: the periodic scan only",
      undefined,
      snap({ hasDownloadRecord: true }),
      undefined,
    ],
    ["nothing to register: the periodic scan only", undefined, snap({ files: 0 }), undefined],
  ])("%s", (_, prev, cur, want) => {
    expect(followUpMs(prev, cur, 3000)).toBe(want);
  });
});

describe("dirAction", () => {
  const ready = { previous: snap({ atMs: 2000 }), current: snap(), settleMs: 3000 };
  it.each([
    ["settled, nothing known against it: admit", { ...ready }, "admit"],
    ["being hashed: leave it", { ...ready, hashing: true }, "leave"],
    [
      "known bad with these very files: leave it",
      { ...ready, badSignature: "w.gguf:10:1000" },
      "leave",
    ],
    ["known bad, files changed since: admit", { ...ready, badSignature: "w.gguf:9:900" }, "admit"],
    [
      "known bad, changed but not settled: wait",
      { ...ready, previous: undefined, badSignature: "w.gguf:9:900" },
      "wait",
    ],
    ["first sight: wait", { ...ready, previous: undefined }, "wait"],
  ])("%s", (_, d, want) => {
    expect(dirAction({ hashing: false, badSignature: undefined, ...d }).kind).toBe(want);
  });

  it("says when to look again while waiting", () => {
    expect(
      dirAction({ ...ready, previous: undefined, hashing: false, badSignature: undefined }),
    ).toEqual({ kind: "wait", followUpMs: 3000 });
  });
});

async function withStore(fn: (store: string) => Promise<void>): Promise<void> {
  const store = await mkdtemp(join(tmpdir(), "ic-watch-"));
  try {
    await fn(store);
  } finally {
    await rm(store, { recursive: true, force: true });
  }
}

function watcher(store: string, o: { now?: () => number; fsWatch?: boolean; settleMs?: number }) {
  const registered = new Set<string>();
  const added: string[] = [];
  const removed: string[] = [];
  const attempts: string[] = [];
  const w = new StoreWatch({
    storePath: store,
    registered: (id) => registered.has(id),
    admit: async (id: ModelId) => {
      attempts.push(id);
      if (id.endsWith("broken")) throw new Error("no artifact files");
      registered.add(id);
      return { kind: "served" as const };
    },
    onAdded: (id) => added.push(id),
    registeredIds: () => [...registered] as ModelId[],
    onRemoved: (id) => {
      registered.delete(id);
      removed.push(id);
    },
    log: silentLogger(),
    settleMs: o.settleMs ?? 3000,
    intervalMs: 3_600_000,
    useFsWatch: o.fsWatch ?? false,
    ...(o.now ? { now: o.now } : {}),
  });
  return { w, added, removed, attempts };
}

const old = (path: string) => {
  const t = new Date(Date.now() - 60_000);
  return utimes(path, t, t);
};

describe("StoreWatch", () => {
  it("registers a copied directory once it stops changing, and never one with a pull's record", async () => {
    await withStore(async (store) => {
      let now = Date.now() + 60_000;
      const { w, added } = watcher(store, { now: () => now });
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
      await old(join(store, "acme--copied", "w.gguf"));
      now += 5000;
      await w.scanOnce();
      expect(added).toEqual([]);
      now += 5000;
      await w.scanOnce();
      expect(added).toEqual(["acme/copied"]);
      now += 5000;
      await w.scanOnce();
      expect(added).toEqual(["acme/copied"]);
    });
  });

  it("waits while a copy tool still writes a hidden temporary file", async () => {
    await withStore(async (store) => {
      let now = Date.now() + 60_000;
      const { w, added } = watcher(store, { now: () => now });
      const dir = join(store, "acme--rsynced");
      await mkdir(dir);
      await writeFile(join(dir, "config.json"), "{}");
      await writeFile(join(dir, ".model.gguf.Xy12ab"), "part");
      await old(join(dir, "config.json"));
      await old(join(dir, ".model.gguf.Xy12ab"));
      await w.scanOnce();
      await writeFile(join(dir, ".model.gguf.Xy12ab"), "partly more");
      await old(join(dir, ".model.gguf.Xy12ab"));
      now += 5000;
      await w.scanOnce();
      expect(added).toEqual([]);
      now += 5000;
      await w.scanOnce();
      expect(added).toEqual(["acme/rsynced"]);
    });
  });

  it("tries a directory that failed to register again only once its files change", async () => {
    await withStore(async (store) => {
      let now = Date.now() + 60_000;
      const { w, attempts } = watcher(store, { now: () => now });
      const dir = join(store, "acme--broken");
      await mkdir(dir);
      await writeFile(join(dir, "w.gguf"), "x");
      await old(join(dir, "w.gguf"));
      for (let i = 0; i < 4; i++) {
        await w.scanOnce();
        now += 5000;
      }
      expect(attempts).toEqual(["acme/broken"]);
      await writeFile(join(dir, "w.gguf"), "xy");
      await old(join(dir, "w.gguf"));
      for (let i = 0; i < 2; i++) {
        await w.scanOnce();
        now += 5000;
      }
      expect(attempts).toEqual(["acme/broken", "acme/broken"]);
    });
  });

  it("with fs.watch, registers a copied model and notices a removed one without the periodic scan", async () => {
    await withStore(async (store) => {
      const { w, added, removed } = watcher(store, { fsWatch: true, settleMs: 300 });
      w.start();
      try {
        const dir = join(store, "acme--copied");
        await mkdir(dir);
        await writeFile(join(dir, "w.gguf"), "weights");
        const until = async (what: () => boolean) => {
          const deadline = Date.now() + 10_000;
          while (!what()) {
            if (Date.now() > deadline) throw new Error("timed out");
            await new Promise((r) => setTimeout(r, 50));
          }
        };
        await until(() => added.length > 0);
        expect(added).toEqual(["acme/copied"]);
        await rm(dir, { recursive: true });
        await until(() => removed.length > 0);
        expect(removed).toEqual(["acme/copied"]);
      } finally {
        await w.stop();
      }
    });
  });
});

describe("StoreWatch with a store host that hashes in the background", () => {
  it("admits the other directories while one is being hashed, and leaves that one alone", async () => {
    await withStore(async (store) => {
      let now = Date.now() + 60_000;
      for (const name of ["acme--big", "acme--small"]) {
        await mkdir(join(store, name));
        await writeFile(join(store, name, "w.gguf"), name);
        await old(join(store, name, "w.gguf"));
      }
      const admitted: string[] = [];
      const added: string[] = [];
      let finish!: () => void;
      const bigDone = new Promise<void>((r) => (finish = r));
      const w = new StoreWatch({
        storePath: store,
        registered: (id) => added.includes(id),
        admit: async (id): Promise<Admission> => {
          admitted.push(id);
          return id === "acme/big" ? { kind: "hashing", done: bigDone } : { kind: "served" };
        },
        onAdded: (id) => added.push(id),
        log: silentLogger(),
        settleMs: 3000,
        intervalMs: 3_600_000,
        useFsWatch: false,
        now: () => now,
      });
      await w.scanOnce();
      now += 5000;
      // The scan returns although the big one's hash has not ended.
      await w.scanOnce();
      expect(admitted).toEqual(["acme/big", "acme/small"]);
      expect(added).toEqual(["acme/small"]);
      for (let i = 0; i < 3; i++) {
        now += 5000;
        await w.scanOnce();
      }
      expect(admitted).toEqual(["acme/big", "acme/small"]);
      finish();
      await bigDone;
      await new Promise((r) => setImmediate(r));
      expect(added).toEqual(["acme/small", "acme/big"]);
    });
  });

  it("leaves a directory the host found changed until its files change, then admits it again", async () => {
    await withStore(async (store) => {
      let now = Date.now() + 60_000;
      const dir = join(store, "acme--changed");
      await mkdir(dir);
      await writeFile(join(dir, "w.gguf"), "wrong size");
      await old(join(dir, "w.gguf"));
      const bad = new Map<string, string>();
      const admitted: string[] = [];
      const gone: string[] = [];
      const w = new StoreWatch({
        storePath: store,
        registered: () => false,
        admit: async (id): Promise<Admission> => {
          admitted.push(id);
          bad.set(id, dirSignature(await walkFiles(dir)));
          return { kind: "changed" };
        },
        badSignature: (id) => bad.get(id),
        onAdded: () => undefined,
        onUnservedGone: (id) => gone.push(id),
        log: silentLogger(),
        settleMs: 3000,
        intervalMs: 3_600_000,
        useFsWatch: false,
        now: () => now,
      });
      for (let i = 0; i < 5; i++) {
        await w.scanOnce();
        now += 5000;
      }
      expect(admitted).toEqual(["acme/changed"]);
      await writeFile(join(dir, "w.gguf"), "right");
      await old(join(dir, "w.gguf"));
      for (let i = 0; i < 2; i++) {
        await w.scanOnce();
        now += 5000;
      }
      expect(admitted).toEqual(["acme/changed", "acme/changed"]);
      await rm(dir, { recursive: true });
      await w.scanOnce();
      expect(gone).toEqual(["acme/changed"]);
    });
  });
});

describe("looseEntries", () => {
  it("names files and misnamed folders at the top of store_path; hidden ones are the store's", () => {
    const loose = looseEntries([
      { name: "acme--tiny", dir: true },
      { name: "model.Q4_K_M.gguf", dir: false },
      { name: "llama 3", dir: true },
      { name: "notes.txt", dir: false },
      { name: ".uploads", dir: true },
      { name: ".tmp-copy", dir: false },
    ]);
    expect(loose.map((e) => e.name)).toEqual(["model.Q4_K_M.gguf", "llama 3", "notes.txt"]);
    expect(loose[0]!.hint).toContain("local--model.Q4_K_M/model.Q4_K_M.gguf");
    expect(loose[1]!.hint).toContain("<org>--<name>");
  });
});
