// Two test projects: fast unit tests beside the code, and integration tests with real processes.
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: "unit",
          include: ["packages/*/src/**/*.test.ts", "services/*/src/**/*.test.ts"],
          exclude: ["**/*.integration.test.ts", "**/*.chaos.test.ts", "**/node_modules/**"],
          testTimeout: 20_000,
        },
      },
      {
        test: {
          name: "integration",
          include: [
            "packages/*/src/**/*.integration.test.ts",
            "services/*/src/**/*.integration.test.ts",
            "tests/**/*.integration.test.ts",
          ],
          exclude: ["**/node_modules/**", "**/*.chaos.test.ts"],
          testTimeout: 120_000,
          hookTimeout: 120_000,
          fileParallelism: false,
          pool: "forks",
        },
      },
      {
        // kill -9 of every kind of process under load, on real clusters across network namespaces.
        test: {
          name: "chaos",
          include: ["services/*/src/**/*.chaos.test.ts"],
          exclude: ["**/node_modules/**"],
          testTimeout: 180_000,
          hookTimeout: 180_000,
          fileParallelism: false,
          pool: "forks",
        },
      },
    ],
  },
});
