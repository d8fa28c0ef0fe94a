#!/usr/bin/env node
// Records how long each test file took, for the order files start in on a fresh clone
// (tests/sequencer.ts reads tests/durations.json). Give it vitest's JSON report of a run:
//
//   npx vitest run --reporter=default --reporter=json --outputFile.json=/tmp/report.json
//   node scripts/record-durations.mjs /tmp/report.json
//
// Files in the report are updated, files no longer in the repository are dropped, others are kept
// (so a run of one project updates that project's files only). Seconds, one decimal.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const target = join(root, "tests", "durations.json");
const [reportPath] = process.argv.slice(2);
if (!reportPath) {
  process.stderr.write("usage: node scripts/record-durations.mjs <vitest json report>\n");
  process.exit(2);
}

const report = JSON.parse(readFileSync(reportPath, "utf8"));
const durations = existsSync(target) ? JSON.parse(readFileSync(target, "utf8")) : {};
for (const r of report.testResults ?? []) {
  const file = relative(root, r.name);
  if (r.endTime > r.startTime) durations[file] = Math.round((r.endTime - r.startTime) / 100) / 10;
}
const kept = Object.entries(durations)
  .filter(([file]) => existsSync(join(root, file)))
  .sort(([a], [b]) => a.localeCompare(b));
writeFileSync(target, `${JSON.stringify(Object.fromEntries(kept), null, 2)}\n`);
process.stdout.write(`${kept.length} files in ${relative(process.cwd(), target)}\n`);
