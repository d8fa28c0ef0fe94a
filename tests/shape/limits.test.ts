// The size limits are lint rules (eslint.config.js): a file over 500 lines, a function over 80 or
// with more than 4 parameters fails lint, unless an override with its reason covers that file.
// Linted here with the repository's own config, on code written for the test.
import { join } from "node:path";
import { ESLint } from "eslint";
import { describe, expect, it } from "vitest";
import { ROOT } from "./repo.ts";

// The type-aware rules need a file on disk in a project; the limits do not.
const eslint = new ESLint({
  cwd: ROOT,
  overrideConfig: {
    languageOptions: { parserOptions: { projectService: false } },
    rules: { "@typescript-eslint/no-floating-promises": "off" },
  },
});

async function limitErrors(path: string, text: string): Promise<string[]> {
  const [r] = await eslint.lintText(text, { filePath: join(ROOT, path) });
  return r!.messages
    .filter((m) => ["max-lines", "max-lines-per-function", "max-params"].includes(m.ruleId ?? ""))
    .map((m) => `${m.ruleId}: ${m.message}`);
}

const fn = (lines: number) =>
  `export function long(): number {\n  let n = 0;\n${"  n += 1;\n".repeat(lines - 4)}  return n;\n}\n`;
const file = (lines: number) =>
  Array.from({ length: lines }, (_, i) => `export const v${i} = ${i};`).join("\n") + "\n";

describe("size limits are lint rules", () => {
  it("a file over 500 lines fails; blank lines and comments do not count", async () => {
    expect(await limitErrors("packages/protocol/src/probe.ts", file(501))).toEqual([
      "max-lines: File has too many lines (501). Maximum allowed is 500.",
    ]);
    const padded = file(500) + "\n// a comment\n".repeat(40);
    expect(await limitErrors("packages/protocol/src/probe.ts", padded)).toEqual([]);
  });

  it("a function over 80 lines fails", async () => {
    expect(await limitErrors("services/gateway/src/probe.ts", fn(81))).toEqual([
      "max-lines-per-function: Function 'long' has too many lines (81). Maximum allowed is 80.",
    ]);
    expect(await limitErrors("services/gateway/src/probe.ts", fn(80))).toEqual([]);
  });

  it("more than 4 parameters fail", async () => {
    const five =
      "export function f(a: 1, b: 2, c: 3, d: 4, e: 5): number {\n  return a + b + c + d + e;\n}\n";
    expect(await limitErrors("bench/probe.ts", five)).toEqual([
      "max-params: Function 'f' has too many parameters (5). Maximum allowed is 4.",
    ]);
  });

  it("an override covers only the file it names, with its own bound", async () => {
    // The reducer is a table (one case per event type): up to 130 lines.
    expect(await limitErrors("packages/state/src/apply.ts", fn(120))).toEqual([]);
    expect(await limitErrors("packages/state/src/apply.ts", fn(131))).toHaveLength(1);
    expect(await limitErrors("packages/state/src/other.ts", fn(120))).toHaveLength(1);
  });

  it("test files keep the file limit unless named; their cases may be long", async () => {
    expect(await limitErrors("services/worker/src/probe.test.ts", fn(200))).toEqual([]);
    expect(await limitErrors("services/worker/src/probe.test.ts", file(501))).toHaveLength(1);
  });
});
