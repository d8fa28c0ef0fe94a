// The order test files start in: longest first, so that the two workers of the integration run end
// together rather than one waiting on the last long file (longest-processing-time-first). vitest's
// own order uses the durations of the last run, which a fresh clone (CI) does not have; there it
// falls back to file size, which put the longest file (compose, ~4 min) near the end. So a file's
// duration is the last local run's where vitest has it, else the one recorded in durations.json
// (`node scripts/record-durations.mjs <json report>` rewrites it), else 0 (unknown files go last).
// Failed files still go first, as in vitest's own order. Order only: no test depends on it.
import { readFileSync } from "node:fs";
import { relative } from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";

const recorded = JSON.parse(
  readFileSync(new URL("./durations.json", import.meta.url), "utf8"),
) as Record<string, number>;

export class LongestFirst extends BaseSequencer {
  override sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const root = this.ctx.config.root;
    const key = (f: TestSpecification) => `${f.project.name}:${relative(root, f.moduleId)}`;
    const facts = new Map(
      files.map((f) => {
        const last = this.ctx.cache.getFileTestResults(key(f));
        const seconds = last ? last.duration / 1000 : (recorded[relative(root, f.moduleId)] ?? 0);
        return [f, { failed: last?.failed === true, seconds }] as const;
      }),
    );
    return Promise.resolve(
      [...files].sort((a, b) => {
        const fa = facts.get(a)!;
        const fb = facts.get(b)!;
        if (fa.failed !== fb.failed) return fa.failed ? -1 : 1;
        return fb.seconds - fa.seconds;
      }),
    );
  }
}
