import { describe, expect, it } from "vitest";
import { HealthEntrySchema } from "@ic/protocol";
import type { ModelId } from "@ic/protocol";
import { missingModelHealth } from "./routes.ts";

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
