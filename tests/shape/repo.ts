// The repository as the shape tests read it: its root, and its source files by walking the folders
// (node_modules, build output and generated data left out).
import { readdirSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

const SKIP = new Set(["node_modules", ".git", ".turbo", "dist", "coverage"]);

/** Paths (relative to the root) under `dirs` whose names end with one of `exts`. */
export function filesUnder(dirs: readonly string[], exts: readonly string[]): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(join(ROOT, dir))) {
      if (SKIP.has(name) || name.startsWith(".")) continue;
      const rel = join(dir, name);
      if (statSync(join(ROOT, rel)).isDirectory()) walk(rel);
      else if (exts.some((e) => name.endsWith(e))) out.push(rel);
    }
  };
  for (const d of dirs) walk(d);
  return out.sort();
}

/** Every file of the repository (any extension), relative to the root. */
export function allFiles(): string[] {
  const top = readdirSync(ROOT).filter((n) => !SKIP.has(n) && !n.startsWith("."));
  const files = top.filter((n) => !statSync(join(ROOT, n)).isDirectory());
  const dirs = top.filter((n) => statSync(join(ROOT, n)).isDirectory());
  return [...files, ...filesUnder(dirs, [""])].map((p) => relative(ROOT, join(ROOT, p)));
}
