// What the guides name: file names in the docs, the README and the code's comments, and the
// functions the docs name as `name()`; and whether each still exists in the repository.
import { readFileSync } from "node:fs";
import { basename, dirname, join, normalize } from "node:path";
import { allFiles, filesUnder, ROOT } from "./repo.ts";

/** A name a guide gives, where. */
export interface Mention {
  readonly where: string;
  readonly line: number;
  readonly name: string;
}

const FILE_NAME = /(?<![\w@:/.-])((?:[\w.-]+\/)*[\w-][\w.-]*\.(?:ts|md|js|mjs|sh))(?![\w/-])/g;

/** The comment text of a TypeScript line (after `//`, or inside a block comment), else "". */
function commentOf(line: string): string {
  const t = line.trim();
  if (t.startsWith("//")) return t.slice(2);
  if (t.startsWith("*") || t.startsWith("/**")) return t.replace(/^\/?\*+/, "");
  const i = line.indexOf(" // ");
  return i >= 0 ? line.slice(i + 4) : "";
}

/** The markdown guides: the README, docs/ and each service's module map. */
function guides(): string[] {
  const maps = filesUnder(["services"], ["README.md"]).filter((p) => p.split("/").length === 3);
  return ["README.md", ...filesUnder(["docs"], [".md"]), ...maps];
}

/**
 * The guide lines a check reads: markdown outside fenced blocks of recorded output (a benchmark's
 * profile prints paths as its tool shortens them), and the comments of code.
 */
function guideLines(where: string): { text: string; line: number }[] {
  const raw = readFileSync(join(ROOT, where), "utf8").split("\n");
  if (!where.endsWith(".md"))
    return raw.map((l, i) => ({ text: commentOf(l), line: i + 1 })).filter((l) => l.text);
  const out: { text: string; line: number }[] = [];
  let fenced = false;
  raw.forEach((text, i) => {
    if (text.trimStart().startsWith("```")) fenced = !fenced;
    else if (!fenced || !where.endsWith("benchmarks.md")) out.push({ text, line: i + 1 });
  });
  return out;
}

/** Every file name in the guides: markdown whole, code comments only. */
export function fileMentions(): Mention[] {
  const code = filesUnder(["packages", "services", "bench", "tests", "scripts"], [".ts", ".mjs"]);
  const out: Mention[] = [];
  for (const where of [...guides(), ...code])
    for (const { text, line } of guideLines(where))
      for (const m of text.matchAll(FILE_NAME)) out.push({ where, line, name: m[1]! });
  return out;
}

/** The code names the docs give in backticks: camelCase or PascalCase words, and `name()`. */
export function codeMentions(): Mention[] {
  const out: Mention[] = [];
  for (const where of guides())
    for (const { text, line } of guideLines(where))
      for (const m of text.matchAll(/`([a-z][a-z0-9]*[A-Z]\w*|[A-Z][a-z0-9]+[A-Z]\w*)(?:\(\))?`/g))
        out.push({ where, line, name: m[1]! });
  return out;
}

/** Every word of the source (code, tests, scripts): what a code name must be one of. */
export function sourceWords(): Set<string> {
  const words = new Set<string>();
  const source = filesUnder(
    ["packages", "services", "bench", "scripts", "tests"],
    [".ts", ".js", ".mjs"],
  );
  // Not this check's own files: they name what must not exist.
  for (const f of source.filter((p) => !p.startsWith("tests/shape/")))
    for (const w of readFileSync(join(ROOT, f), "utf8").match(/\b\w+\b/g) ?? []) words.add(w);
  return words;
}

/** Whether a named file exists: as a path from the root or its guide, a path's tail, or a base name. */
export function fileResolver(): (m: Mention) => boolean {
  const files = allFiles();
  const set = new Set(files);
  const names = new Set(files.map((f) => basename(f)));
  return ({ where, name }) => {
    if (!name.includes("/")) return names.has(name);
    const clean = name.replace(/^\.\//, "");
    if (set.has(normalize(clean)) || set.has(normalize(join(dirname(where), clean)))) return true;
    return files.some((f) => f.endsWith(`/${clean}`));
  };
}
