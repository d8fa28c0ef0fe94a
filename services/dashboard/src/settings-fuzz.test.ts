// Property test of PUT /admin/settings behind the gateway's edge: any body (valid edits, wrong types,
// unknown keys, junk) gets 200 or a typed 400, never a 5xx; the file always loads afterwards and
// keeps its comments; a refused edit leaves it byte for byte; an accepted one sets exactly the keys
// it named (null removes) and the live settings equal what the file gives this node.
import { readFileSync } from "node:fs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { loadConfig, stagingFor } from "@ic/config";
import { stagingSettings } from "@ic/staging";
import { dashboardApp, settingsFixture } from "./testing.ts";

const KEYS = ["cleanup_on_deactivate", "staging_keep_recent_gb", "headroom_gb"] as const;
const START = `# operator comment
node:
  name: n1 # inline
model_store:
  staging:
    headroom_gb: 10 # reserve
`;

const value = fc.oneof(
  fc.boolean(),
  fc.double({ min: 0, max: 1e6, noNaN: true }),
  fc.double({ noNaN: true }),
  fc.integer({ min: -5, max: 5 }),
  fc.constant(null),
  fc.string({ maxLength: 5 }),
  fc.constant([]),
  fc.constant({}),
);
const section = fc.dictionary(
  fc.oneof(fc.constantFrom(...KEYS), fc.constantFrom("nope", "__proto__", "")),
  value,
  { maxKeys: 4 },
);
const body = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({ staging: section, node_override: section }, { requiredKeys: [] }),
  },
  { weight: 1, arbitrary: fc.jsonValue().map((v) => JSON.stringify(v)) },
  { weight: 1, arbitrary: fc.string({ maxLength: 20 }) },
);

type Section = Record<string, unknown>;
const stagingOf = (doc: unknown, path: string[]): Section => {
  let at: unknown = doc;
  for (const k of path) at = (at as Record<string, unknown> | undefined)?.[k];
  return (at as Section | undefined) ?? {};
};

describe("PUT /admin/settings under generated bodies", () => {
  it("answers 200 or a typed 400, keeps the file loadable and commented, applies exactly what it accepted", async () => {
    const fx = settingsFixture(START);
    const { file, live } = fx;
    const app = dashboardApp(fx);
    const { parse } = await import("yaml");
    const seen = { accepted: 0, refused: 0 };

    await fc.assert(
      fc.asyncProperty(body, async (b) => {
        const before = readFileSync(file, "utf8");
        const r = await app.request("/admin/settings", {
          method: "PUT",
          headers: { "content-type": "application/json" },
          body: typeof b === "string" ? b : JSON.stringify(b),
        });
        expect([200, 400]).toContain(r.status);
        const answer = (await r.json()) as { error?: { code: string } };
        const after = readFileSync(file, "utf8");
        const cfg = loadConfig({ file, env: {} });
        expect(after).toContain("# operator comment");
        expect(after).toContain("name: n1 # inline");
        if (r.status !== 200) {
          seen.refused++;
          expect(answer.error?.code).toBe("invalid_request");
          expect(after).toBe(before);
        } else {
          seen.accepted++;
          const edit = b as { staging?: Section; node_override?: Section };
          const paths: [Section | undefined, string[]][] = [
            [edit.staging, ["model_store", "staging"]],
            [edit.node_override, ["node_overrides", "n1", "model_store", "staging"]],
          ];
          for (const [values, path] of paths) {
            const was = stagingOf(parse(before), path);
            const now = stagingOf(parse(after), path);
            for (const k of KEYS) {
              const v = values?.[k];
              if (v === undefined) expect(now[k]).toEqual(was[k]);
              else if (v === null) expect(now[k]).toBeUndefined();
              else expect(now[k]).toEqual(v);
            }
          }
          expect(live.current).toEqual(stagingSettings(stagingFor(cfg, "n1")));
        }
      }),
      { numRuns: Number(process.env.FUZZ_RUNS ?? 300), seed: Number(process.env.FUZZ_SEED ?? 17) },
    );
    // Both outcomes were exercised (the generator is not all junk, nor all valid).
    expect(seen.accepted).toBeGreaterThan(20);
    expect(seen.refused).toBeGreaterThan(20);
  });
});
