// Table-driven tests of planEviction, one block per eviction rule of the spec, plus invariants.
// Sizes are in GiB to read like the spec; time is a plain counter (higher = more recently used).
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import type { ModelId } from "@ic/protocol";
import { planEviction, type EvictionInput, type StagedCopy } from "./evict.ts";
import { noFitMessage } from "./message.ts";
import { GiB } from "@ic/protocol";
const id = (s: string): ModelId => `org/${s}` as ModelId;

/** `copy("a", 10, 5)`: model org/a, 10 GiB, last used at t=5, idle. */
function copy(name: string, gib: number, t: number, flags: Partial<StagedCopy> = {}): StagedCopy {
  return {
    modelId: id(name),
    bytes: gib * GiB,
    lastUsedMs: t,
    inUse: false,
    companionOfActive: false,
    downloading: false,
    ...flags,
  };
}

const names = (ids: readonly ModelId[]): string[] => ids.map((m) => m.slice(4));

interface Row {
  readonly name: string;
  readonly input: Omit<EvictionInput, "keepRecentBytes" | "cleanupOnDeactivate"> & {
    keepRecentGib?: number;
    cleanupOnDeactivate?: boolean;
  };
  readonly deleted: string[];
  readonly fits?: boolean;
  readonly shortfallGib?: number;
}

function run(row: Row) {
  const { keepRecentGib = 40, cleanupOnDeactivate = true, ...rest } = row.input;
  return planEviction({ ...rest, keepRecentBytes: keepRecentGib * GiB, cleanupOnDeactivate });
}

function table(rows: Row[]) {
  it.each(rows.map((r) => [r.name, r] as const))("%s", (_name, row) => {
    const plan = run(row);
    expect(names(plan.delete)).toEqual(row.deleted);
    expect(plan.items.map((i) => i.modelId)).toEqual(plan.delete);
    if (row.fits !== undefined) expect(plan.fits).toBe(row.fits);
    if (row.shortfallGib !== undefined) expect(plan.shortfallBytes).toBe(row.shortfallGib * GiB);
    // Every staged copy is either deleted or kept, exactly once.
    const all = [...plan.delete, ...plan.kept.map((k) => k.modelId)].sort();
    expect(all).toEqual(row.input.staged.map((s) => s.modelId).sort());
  });
}

describe("rules 2 and 4: lifecycle passes keep recent idle copies newest-first up to the grace budget", () => {
  table([
    {
      name: "everything fits in the budget: nothing deleted",
      input: {
        trigger: "deactivation",
        staged: [copy("a", 10, 1), copy("b", 10, 2)],
        keepRecentGib: 40,
      },
      deleted: [],
    },
    {
      name: "oldest copies beyond the budget are deleted, oldest first",
      input: {
        trigger: "deactivation",
        staged: [copy("a", 20, 1), copy("b", 20, 2), copy("c", 20, 3), copy("d", 20, 4)],
        keepRecentGib: 40,
      },
      deleted: ["a", "b"],
    },
    {
      name: "a copy that lands exactly on the budget is kept",
      input: {
        trigger: "deactivation",
        staged: [copy("a", 15, 1), copy("b", 25, 2)],
        keepRecentGib: 40,
      },
      deleted: [],
    },
    {
      name: "one byte over the budget deletes the older copy",
      input: {
        trigger: "deactivation",
        staged: [{ ...copy("a", 15, 1), bytes: 15 * GiB + 1 }, copy("b", 25, 2)],
        keepRecentGib: 40,
      },
      deleted: ["a"],
    },
    {
      name: "the budget is a newest-first prefix: a small older copy behind a large one is deleted too",
      input: {
        trigger: "deactivation",
        staged: [copy("small-old", 1, 1), copy("big", 50, 2), copy("new", 10, 3)],
        keepRecentGib: 40,
      },
      deleted: ["small-old", "big"],
    },
    {
      name: "recency, not size or name, decides",
      input: {
        trigger: "deactivation",
        staged: [copy("z", 30, 9), copy("a", 30, 1)],
        keepRecentGib: 40,
      },
      deleted: ["a"],
    },
    {
      name: "equal last-use times are ordered by model id for a deterministic plan",
      input: {
        trigger: "deactivation",
        staged: [copy("b", 30, 5), copy("a", 30, 5)],
        keepRecentGib: 40,
      },
      deleted: ["b"],
    },
    {
      name: "startup runs the same recency pass (reconciles copies orphaned by a crashed session)",
      input: {
        trigger: "startup",
        staged: [copy("a", 30, 1), copy("b", 30, 2)],
        keepRecentGib: 40,
      },
      deleted: ["a"],
    },
    {
      name: "no staged copies: nothing to do",
      input: { trigger: "startup", staged: [] },
      deleted: [],
    },
  ]);
});

describe("rule 3: only copies no live runner uses are candidates (companions count as in use)", () => {
  table([
    {
      name: "an in-use copy beyond the budget is kept",
      input: {
        trigger: "deactivation",
        staged: [copy("live", 100, 1, { inUse: true }), copy("idle", 10, 2)],
        keepRecentGib: 0,
      },
      deleted: ["idle"],
    },
    {
      name: "in-use copies do not consume the grace budget",
      input: {
        trigger: "deactivation",
        staged: [copy("live", 100, 9, { inUse: true }), copy("a", 20, 1), copy("b", 20, 2)],
        keepRecentGib: 40,
      },
      deleted: [],
    },
    {
      name: "a companion of an active model is kept",
      input: {
        trigger: "deactivation",
        staged: [copy("drafter", 5, 1, { companionOfActive: true }), copy("idle", 5, 2)],
        keepRecentGib: 0,
      },
      deleted: ["idle"],
    },
    {
      name: "a copy being downloaded is kept",
      input: {
        trigger: "startup",
        staged: [copy("incoming", 5, 1, { downloading: true })],
        keepRecentGib: 0,
      },
      deleted: [],
    },
  ]);

  it("reports why each copy is kept", () => {
    const plan = planEviction({
      trigger: "deactivation",
      staged: [
        copy("live", 1, 1, { inUse: true }),
        copy("comp", 1, 2, { companionOfActive: true }),
        copy("dl", 1, 3, { downloading: true }),
        copy("recent", 1, 4),
      ],
      keepRecentBytes: 40 * GiB,
      cleanupOnDeactivate: true,
    });
    expect(Object.fromEntries(plan.kept.map((k) => [k.modelId, k.reason]))).toEqual({
      "org/live": "in_use",
      "org/comp": "companion_of_active",
      "org/dl": "downloading",
      "org/recent": "within_keep_recent",
    });
  });
});

describe("rule 5: lifecycle passes run only when cleanup_on_deactivate is true", () => {
  table([
    {
      name: "deactivation with cleanup off keeps everything",
      input: {
        trigger: "deactivation",
        staged: [copy("a", 100, 1), copy("b", 100, 2)],
        keepRecentGib: 0,
        cleanupOnDeactivate: false,
      },
      deleted: [],
    },
    {
      name: "startup with cleanup off keeps everything",
      input: {
        trigger: "startup",
        staged: [copy("a", 100, 1)],
        keepRecentGib: 0,
        cleanupOnDeactivate: false,
      },
      deleted: [],
    },
    {
      name: "the capacity pass still evicts with cleanup off",
      input: {
        trigger: "capacity",
        staged: [copy("a", 30, 1), copy("b", 30, 2)],
        cleanupOnDeactivate: false,
        capacity: {
          requiredBytes: 20 * GiB,
          freeBytes: 15 * GiB,
          headroomBytes: 10 * GiB,
          protectedIds: [],
        },
      },
      deleted: ["a"],
      fits: true,
    },
  ]);

  it("marks copies kept because cleanup is disabled", () => {
    const plan = planEviction({
      trigger: "deactivation",
      staged: [copy("a", 1, 1), copy("live", 1, 2, { inUse: true })],
      keepRecentBytes: 0,
      cleanupOnDeactivate: false,
    });
    expect(plan.kept).toEqual([
      { modelId: id("live"), reason: "in_use" },
      { modelId: id("a"), reason: "cleanup_disabled" },
    ]);
  });
});

describe("rule 6: the pre-download capacity pass", () => {
  const cap = (
    requiredGib: number,
    freeGib: number,
    protectedIds: string[] = [],
    headroomGib = 10,
  ) => ({
    requiredBytes: requiredGib * GiB,
    freeBytes: freeGib * GiB,
    headroomBytes: headroomGib * GiB,
    protectedIds: protectedIds.map(id),
  });
  table([
    {
      name: "enough free space with the headroom: nothing deleted",
      input: { trigger: "capacity", staged: [copy("a", 10, 1)], capacity: cap(20, 40) },
      deleted: [],
      fits: true,
      shortfallGib: 0,
    },
    {
      name: "exactly required + headroom free fits",
      input: { trigger: "capacity", staged: [copy("a", 10, 1)], capacity: cap(20, 30) },
      deleted: [],
      fits: true,
    },
    {
      name: "idle copies are removed oldest-first only until the allocation fits",
      input: {
        trigger: "capacity",
        staged: [copy("new", 10, 3), copy("old", 10, 1), copy("mid", 10, 2)],
        capacity: cap(20, 15),
      },
      deleted: ["old", "mid"],
      fits: true,
    },
    {
      name: "disk safety overrides the grace budget",
      input: {
        trigger: "capacity",
        staged: [copy("a", 10, 1), copy("b", 10, 2)],
        keepRecentGib: 1000,
        capacity: cap(20, 25),
      },
      deleted: ["a"],
      fits: true,
    },
    {
      name: "the incoming partial model is protected",
      input: {
        trigger: "capacity",
        staged: [copy("incoming", 50, 0), copy("old", 10, 1)],
        capacity: cap(20, 25, ["incoming"]),
      },
      deleted: ["old"],
      fits: true,
    },
    {
      name: "live runners, active downloads and companions are protected",
      input: {
        trigger: "capacity",
        staged: [
          copy("live", 50, 0, { inUse: true }),
          copy("dl", 50, 0, { downloading: true }),
          copy("comp", 50, 0, { companionOfActive: true }),
          copy("idle", 10, 5),
        ],
        capacity: cap(20, 25),
      },
      deleted: ["idle"],
      fits: true,
    },
    {
      name: "no safe fit: nothing deleted and the exact shortfall reported",
      input: {
        trigger: "capacity",
        staged: [copy("a", 3, 1), copy("live", 100, 2, { inUse: true }), copy("incoming", 7, 0)],
        capacity: cap(20, 12, ["incoming"]),
      },
      deleted: [],
      fits: false,
      shortfallGib: 15,
    },
    {
      name: "deleting every candidate reaching exactly the need fits",
      input: {
        trigger: "capacity",
        staged: [copy("a", 5, 1), copy("b", 5, 2)],
        capacity: cap(20, 20),
      },
      deleted: ["a", "b"],
      fits: true,
    },
    {
      name: "copies hardlinked from the store free nothing and are not deleted",
      input: {
        trigger: "capacity",
        staged: [{ ...copy("linked", 30, 1), freeableBytes: 0 }, copy("copied", 10, 2)],
        capacity: cap(20, 25),
      },
      deleted: ["copied"],
      fits: true,
    },
    {
      name: "hardlinked copies do not count as reclaimable",
      input: {
        trigger: "capacity",
        staged: [{ ...copy("linked", 30, 1), freeableBytes: 0 }],
        capacity: cap(20, 25),
      },
      deleted: [],
      fits: false,
      shortfallGib: 5,
    },
    {
      name: "a configurable small headroom is honoured",
      input: { trigger: "capacity", staged: [copy("a", 1, 1)], capacity: cap(2, 2.5, [], 1) },
      deleted: ["a"],
      fits: true,
    },
  ]);

  it("returns the arithmetic used for the decision", () => {
    const plan = planEviction({
      trigger: "capacity",
      staged: [copy("a", 3, 1)],
      keepRecentBytes: 0,
      cleanupOnDeactivate: true,
      capacity: cap(20, 12),
    });
    expect(plan.capacity).toEqual({
      requiredBytes: 20 * GiB,
      headroomBytes: 10 * GiB,
      freeBytes: 12 * GiB,
      reclaimableBytes: 3 * GiB,
    });
    expect(plan.freedBytes).toBe(0);
  });

  it("throws when the capacity request is missing", () => {
    expect(() =>
      planEviction({
        trigger: "capacity",
        staged: [],
        keepRecentBytes: 0,
        cleanupOnDeactivate: true,
      }),
    ).toThrow(/capacity request/);
  });
});

describe("rule 2: purge is an unconditional reset of copies not in use", () => {
  table([
    {
      name: "purge deletes every idle copy regardless of budget and cleanup flag",
      input: {
        trigger: "purge",
        staged: [copy("a", 1, 1), copy("b", 1, 2)],
        keepRecentGib: 1000,
        cleanupOnDeactivate: false,
      },
      deleted: ["a", "b"],
    },
    {
      name: "purge keeps in-use copies, companions and active downloads",
      input: {
        trigger: "purge",
        staged: [
          copy("live", 1, 1, { inUse: true }),
          copy("comp", 1, 2, { companionOfActive: true }),
          copy("dl", 1, 3, { downloading: true }),
          copy("idle", 1, 4),
        ],
      },
      deleted: ["idle"],
    },
    {
      name: "purge of a named model deletes only that model",
      input: {
        trigger: "purge",
        staged: [copy("a", 1, 1), copy("b", 1, 2)],
        purgeModelId: id("b"),
      },
      deleted: ["b"],
    },
    {
      name: "purge of a named model that is in use deletes nothing",
      input: {
        trigger: "purge",
        staged: [copy("a", 1, 1), copy("b", 1, 2, { inUse: true })],
        purgeModelId: id("b"),
      },
      deleted: [],
    },
    {
      name: "purge of a model that is not staged deletes nothing",
      input: { trigger: "purge", staged: [copy("a", 1, 1)], purgeModelId: id("zzz") },
      deleted: [],
    },
  ]);

  it("reports the freed bytes and why named-but-busy copies stay", () => {
    const plan = planEviction({
      trigger: "purge",
      staged: [copy("a", 2, 1), copy("b", 3, 2, { companionOfActive: true })],
      keepRecentBytes: 0,
      cleanupOnDeactivate: true,
    });
    expect(plan.freedBytes).toBe(2 * GiB);
    expect(plan.kept).toEqual([{ modelId: id("b"), reason: "companion_of_active" }]);
  });
});

describe("rule 9: staging_keep_recent_gb = 0 is strict evict-on-deactivate", () => {
  table([
    {
      name: "every idle copy goes, even tiny and recent ones",
      input: {
        trigger: "deactivation",
        staged: [
          { ...copy("a", 0, 100), bytes: 4096 },
          copy("b", 10, 1),
          { ...copy("empty", 0, 50), bytes: 0 },
        ],
        keepRecentGib: 0,
      },
      deleted: ["b", "empty", "a"],
    },
    {
      name: "in-use copies still stay",
      input: {
        trigger: "deactivation",
        staged: [copy("a", 1, 1, { inUse: true })],
        keepRecentGib: 0,
      },
      deleted: [],
    },
  ]);
});

describe("invariants over random staging states", () => {
  const arbCopy = fc.record({
    name: fc.constantFrom("a", "b", "c", "d", "e", "f", "g", "h"),
    gib: fc.integer({ min: 0, max: 60 }),
    t: fc.integer({ min: 0, max: 1000 }),
    inUse: fc.boolean(),
    companionOfActive: fc.boolean(),
    downloading: fc.boolean(),
  });
  const arbStaged = fc
    .uniqueArray(arbCopy, { selector: (c) => c.name, maxLength: 8 })
    .map((cs) => cs.map((c) => copy(c.name, c.gib, c.t, c)));
  const busy = (c: StagedCopy) => c.inUse || c.companionOfActive || c.downloading;

  it("lifecycle passes never delete busy copies and keep idle bytes within the budget", () => {
    fc.assert(
      fc.property(arbStaged, fc.integer({ min: 0, max: 100 }), (staged, keepGib) => {
        const plan = planEviction({
          trigger: "deactivation",
          staged,
          keepRecentBytes: keepGib * GiB,
          cleanupOnDeactivate: true,
        });
        const deleted = new Set(plan.delete);
        for (const c of staged) if (busy(c)) expect(deleted.has(c.modelId)).toBe(false);
        const keptIdle = staged.filter((c) => !busy(c) && !deleted.has(c.modelId));
        expect(keptIdle.reduce((s, c) => s + c.bytes, 0)).toBeLessThanOrEqual(keepGib * GiB);
        // Every kept idle copy is newer than every deleted one.
        const newestDeleted = Math.max(
          -1,
          ...plan.items.map((i) => staged.find((c) => c.modelId === i.modelId)!.lastUsedMs),
        );
        for (const c of keptIdle) expect(c.lastUsedMs).toBeGreaterThanOrEqual(newestDeleted);
      }),
    );
  });

  it("the capacity pass fits exactly when it says so and never deletes protected copies", () => {
    fc.assert(
      fc.property(
        arbStaged,
        fc.integer({ min: 0, max: 200 }),
        fc.integer({ min: 0, max: 200 }),
        fc.subarray(["a", "b", "c"]),
        (staged, requiredGib, freeGib, prot) => {
          const plan = planEviction({
            trigger: "capacity",
            staged,
            keepRecentBytes: 40 * GiB,
            cleanupOnDeactivate: false,
            capacity: {
              requiredBytes: requiredGib * GiB,
              freeBytes: freeGib * GiB,
              headroomBytes: 10 * GiB,
              protectedIds: prot.map(id),
            },
          });
          const need = (requiredGib + 10) * GiB;
          const deleted = new Set(plan.delete);
          for (const c of staged) {
            if (busy(c) || prot.map(id).includes(c.modelId))
              expect(deleted.has(c.modelId)).toBe(false);
          }
          if (plan.fits) expect(freeGib * GiB + plan.freedBytes).toBeGreaterThanOrEqual(need);
          else {
            expect(plan.delete).toEqual([]);
            expect(plan.shortfallBytes).toBeGreaterThan(0);
          }
          // Minimal: without its last deletion, the plan would not have fitted.
          const last = plan.items.at(-1);
          if (last) expect(freeGib * GiB + plan.freedBytes - last.freeableBytes).toBeLessThan(need);
        },
      ),
    );
  });
});

describe("noFitMessage", () => {
  it("spells out the arithmetic of a refused transfer", () => {
    const msg = noFitMessage({
      modelId: id("m"),
      path: "/data/staging",
      manifestBytes: 3 * GiB,
      requiredBytes: 2 * GiB,
      headroomBytes: 10 * GiB,
      freeBytes: 5 * GiB,
      reclaimableBytes: 1 * GiB,
    });
    expect(msg).toBe(
      "no safe disk fit for org/m on /data/staging: needs 2.00 GiB (2147483648 B) additional of a " +
        "3.00 GiB (3221225472 B) manifest + 10.00 GiB (10737418240 B) headroom = 12.00 GiB (12884901888 B); " +
        "free 5.00 GiB (5368709120 B) + reclaimable idle 1.00 GiB (1073741824 B) = 6.00 GiB (6442450944 B); " +
        "short by 6.00 GiB (6442450944 B); transfer not started",
    );
  });
});
