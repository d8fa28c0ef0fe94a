// docs/cli.md documents every verb and every option the parser takes: a verb or an option added to
// args.ts without its line in the guide fails here.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { VERBS } from "./index.ts";

const GUIDE = readFileSync(new URL("../../../docs/cli.md", import.meta.url), "utf8");

/** The first cell of each row of the verb table, by the verb it starts with. */
function verbRows(): Map<string, string> {
  const rows = new Map<string, string>();
  for (const line of GUIDE.split("\n")) {
    const m = /^\| `([a-z]+)(?:[^|\\]|\\.)*\|/.exec(line);
    if (m) rows.set(m[1]!, (rows.get(m[1]!) ?? "") + m[0]);
  }
  return rows;
}

describe("docs/cli.md", () => {
  const rows = verbRows();
  it.each(Object.keys(VERBS))("has a row for `ic %s`", (verb) => {
    expect(rows.has(verb), `docs/cli.md has no row starting with \`${verb}`).toBe(true);
  });
  const options = Object.entries(VERBS).flatMap(([verb, v]) =>
    Object.entries(v.options).map(([name, o]) => [verb, name, o.short] as const),
  );
  it.each(options)("names `ic %s`'s option --%s in its row", (verb, name, short) => {
    const row = rows.get(verb) ?? "";
    const named = row.includes(`--${name}`) || (short !== undefined && row.includes(`-${short}`));
    expect(named, row).toBe(true);
  });
});
