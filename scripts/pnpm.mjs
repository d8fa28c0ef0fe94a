#!/usr/bin/env node
// Runs the pinned pnpm (package.json "packageManager") through corepack, so no global pnpm is needed.
import { spawnSync } from "node:child_process";

const r = spawnSync("corepack", ["pnpm", ...process.argv.slice(2)], {
  stdio: "inherit",
  env: { ...process.env, COREPACK_ENABLE_DOWNLOAD_PROMPT: "0" },
});
process.exit(r.status ?? 1);
