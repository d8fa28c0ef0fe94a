// Who may depend on whom: packages never on services, and of the services only services/node
// (which composes a node of them all) and the benchmarks depend on other services. Read from each
// package.json and from every import in the source.
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { filesUnder, ROOT } from "./repo.ts";

const SERVICES = new Set(readdirSync(join(ROOT, "services")));
const MAY_USE_SERVICES = new Set(["services/node", "bench", "tests"]);

/** Every workspace package's folder. */
function packages(): string[] {
  const dirs = ["packages", "services"].flatMap((top) =>
    readdirSync(join(ROOT, top)).map((n) => `${top}/${n}`),
  );
  return [...dirs, "bench", "tests"].filter((d) => existsSync(join(ROOT, d, "package.json")));
}

/** The services a folder uses: its package.json's @ic dependencies, and what its source imports. */
function servicesUsed(dir: string): string[] {
  const pkg = JSON.parse(readFileSync(join(ROOT, dir, "package.json"), "utf8")) as {
    dependencies?: Record<string, string>;
    devDependencies?: Record<string, string>;
  };
  const named = Object.keys({ ...pkg.dependencies, ...pkg.devDependencies });
  const imported = filesUnder([dir], [".ts", ".js", ".mjs"]).flatMap((f) =>
    [...readFileSync(join(ROOT, f), "utf8").matchAll(/from\s+"(@ic\/[a-z-]+)/g)].map((m) => m[1]!),
  );
  const own = `@ic/${dir.split("/").pop()}`;
  return [...new Set([...named, ...imported])]
    .filter((n) => n.startsWith("@ic/") && n !== own && SERVICES.has(n.slice(4)))
    .sort();
}

describe("layering", () => {
  it.each(packages().filter((d) => !MAY_USE_SERVICES.has(d)))("%s depends on no service", (dir) => {
    expect(servicesUsed(dir)).toEqual([]);
  });
});
