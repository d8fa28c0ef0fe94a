// Three test projects: unit tests beside the code (and the fuzz suites), integration tests with real
// processes, and the chaos suite (kill -9 under load on real clusters). The unit project runs first;
// integration and chaos files share one pool, longest first (tests/sequencer.ts). How many files
// run side by side is a root option in vitest 3.2 (`maxWorkers`; a project's `fileParallelism` is
// not read), so `npm test` passes it per command: package.json's `check`.
import { defineConfig } from "vitest/config";
import { LongestFirst } from "./tests/sequencer.ts";

/**
 * The test clusters' engines run one thread each (testkit's prepareNode reads this; benchmarks keep
 * the engine's own count). A test machine runs several engines on its cores at once, and two
 * threads each made them contend: the same two files (maintenance and load, side by side) took
 * 115 s with 24-32 answers during the rolling restarts, and 91 s with 135-157 at one thread.
 */
const TEST_ENGINES = { IC_TEST_ENGINE_THREADS: "1" };

export default defineConfig({
  test: {
    sequence: { sequencer: LongestFirst },
    // One module graph per worker, not one per file: importing each file's graph afresh was most of
    // the unit project's time (collect 73 s and prepare 20 s against 102 s of tests: 122 s, and
    // 54 s this way), and ~2 s per integration file. Files restore what they change (timers, env).
    // A pool option, so it is set here for every project (a project's `isolate` is not read).
    poolOptions: { forks: { isolate: false } },
    projects: [
      {
        test: {
          name: "unit",
          // Before the real-process files: the CPU-bound fuzz suites would otherwise share the two
          // cores with them and skew their timing bounds.
          sequence: { groupOrder: 0 },
          include: [
            "packages/*/src/**/*.test.ts",
            "services/*/src/**/*.test.ts",
            // The GPU check's plan, as a dry run (bench/gpu/plan.ts).
            "bench/gpu/*.test.ts",
            // The workload generator's shapes and summary (bench/workload).
            "bench/workload/*.test.ts",
            // The repository's shape: size limits, layering, guides that name what exists.
            "tests/shape/*.test.ts",
          ],
          exclude: ["**/*.integration.test.ts", "**/*.chaos.test.ts", "**/node_modules/**"],
          testTimeout: 20_000,
        },
      },
      {
        test: {
          name: "integration",
          sequence: { groupOrder: 1 },
          include: [
            "packages/*/src/**/*.integration.test.ts",
            "services/*/src/**/*.integration.test.ts",
            "tests/**/*.integration.test.ts",
          ],
          exclude: ["**/node_modules/**", "**/*.chaos.test.ts"],
          env: TEST_ENGINES,
          testTimeout: 120_000,
          hookTimeout: 120_000,
          pool: "forks",
        },
      },
      {
        // kill -9 of every kind of process under load, on real clusters across network namespaces.
        // Same group as integration: its files take the next free worker rather than waiting until
        // every integration file has ended.
        test: {
          name: "chaos",
          sequence: { groupOrder: 1 },
          include: ["services/*/src/**/*.chaos.test.ts", "tests/**/*.chaos.test.ts"],
          exclude: ["**/node_modules/**"],
          env: TEST_ENGINES,
          testTimeout: 180_000,
          hookTimeout: 180_000,
          pool: "forks",
        },
      },
    ],
  },
});
