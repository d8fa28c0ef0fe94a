// The nodeHealth entries of the store host's models: hashing progress (info), changed files and
// refused registrations (warn), each naming the model and saying what to do.
import { describe, expect, it } from "vitest";
import { GiB, HealthEntrySchema, type ModelId } from "@ic/protocol";
import {
  changedModelHealth,
  hashingHealth,
  missingModelHealth,
  refusedModelHealth,
} from "./store-health.ts";

const id = (s: string) => s as ModelId;

describe("hashingHealth", () => {
  it("shows each running hash with its bytes of the total, as info", () => {
    const [entry, ...rest] = hashingHealth([
      {
        model_id: id("acme/big"),
        kind: "register",
        state: "running",
        done_bytes: 5 * GiB,
        total_bytes: 20 * GiB,
      },
    ]);
    expect(rest).toEqual([]);
    expect(HealthEntrySchema.parse(entry)).toMatchObject({
      code: "store_hashing",
      severity: "info",
      model_id: "acme/big",
      message: "hashing acme/big to register it: 5.00 GiB of 20.00 GiB (25%)",
    });
  });

  it("says a backfilled model is served whole meanwhile, and sums up the queue in one entry", () => {
    const queued = Array.from({ length: 7 }, (_, i) => ({
      model_id: id(`acme/q${i}`),
      kind: "register" as const,
      state: "queued" as const,
      done_bytes: 0,
      total_bytes: GiB,
    }));
    const entries = hashingHealth([
      { model_id: id("acme/old"), kind: "pieces", state: "running", done_bytes: 0, total_bytes: 0 },
      ...queued,
    ]);
    expect(entries).toHaveLength(2);
    expect(entries[0]!.message).toContain("served whole until then");
    expect(entries[1]!.message).toBe(
      "waiting to be hashed: acme/q0 (1.00 GiB), acme/q1 (1.00 GiB), acme/q2 (1.00 GiB), acme/q3 (1.00 GiB), acme/q4 (1.00 GiB) and 2 more",
    );
    expect(entries[1]!.model_id).toBeUndefined();
  });

  it("is empty when nothing hashes", () => {
    expect(hashingHealth([])).toEqual([]);
  });
});

describe("changedModelHealth", () => {
  it("names the model, the file and what differs, with both fixes", () => {
    const [entry] = changedModelHealth([
      {
        model_id: id("acme/big"),
        dir: "/store/acme--big",
        signature: "x",
        differences: [
          { file: "big.gguf", problem: "manifest lists 1,234 bytes, disk has 5,678" },
          { file: "b.gguf", problem: "manifest lists 1 bytes, the file is not on disk" },
        ],
      },
    ]);
    expect(HealthEntrySchema.parse(entry)).toEqual({
      code: "store_model_changed",
      severity: "warn",
      model_id: "acme/big",
      message:
        "acme/big is not served nor registered: big.gguf: manifest lists 1,234 bytes, disk has 5,678 (and 1 more files differ)",
      remediation:
        "put back the files its manifest lists, or delete /store/acme--big/.ic-manifest.json to register the files as they are now",
    });
  });
});

describe("refusedModelHealth", () => {
  it("gives each refused model the master's words", () => {
    const entries = refusedModelHealth(
      new Map([[id("acme/bad"), "the master refused it: invalid_request: no layers"]]),
    );
    expect(entries.map((e) => HealthEntrySchema.parse(e))).toEqual([
      expect.objectContaining({
        code: "store_model_refused",
        severity: "warn",
        model_id: "acme/bad",
        message:
          "acme/bad is in the store but not registered in the cluster: the master refused it: invalid_request: no layers",
      }),
    ]);
  });
});

describe("missingModelHealth", () => {
  it("warns once per model removed by hand while in use, naming it, the refusal and the fix", () => {
    const entries = missingModelHealth(
      new Map([["acme/gone" as ModelId, "acme/gone is used by instance i-1"]]),
    );
    expect(entries).toHaveLength(1);
    const [e] = entries;
    expect(HealthEntrySchema.parse(e)).toEqual(e);
    expect(e).toMatchObject({ code: "store_model_missing", severity: "warn" });
    expect(e!.message).toContain("acme/gone is used by instance i-1");
    expect(e!.remediation).toContain("store_path");
    expect(missingModelHealth(new Map())).toEqual([]);
  });
});
