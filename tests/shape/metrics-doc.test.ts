// Every metric the code declares (an `ic_…` name in a non-test source file) is in docs/api.md's
// metrics reference: a new gauge is its service file, its test, and its line there.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { filesUnder, ROOT } from "./repo.ts";

const API = readFileSync(join(ROOT, "docs/api.md"), "utf8");

function declaredNames(): Map<string, string> {
  const names = new Map<string, string>();
  const sources = filesUnder(["packages", "services"], [".ts"]).filter(
    (f) => !f.endsWith(".test.ts") && !f.includes("/testkit/"),
  );
  for (const f of sources)
    for (const m of readFileSync(join(ROOT, f), "utf8").matchAll(/"(ic_[a-z0-9_]+)"/g))
      if (!names.has(m[1]!)) names.set(m[1]!, f);
  return names;
}

describe("docs/api.md's metrics", () => {
  const names = [...declaredNames()];
  it("finds the metrics declared in the code", () => {
    expect(names.length).toBeGreaterThan(40);
  });
  it.each(names)("documents %s (declared in %s)", (name) => {
    expect(API).toContain(`\`${name}\``);
  });
});
