#!/usr/bin/env node
// Runs the pinned pnpm (package.json "packageManager") through corepack, so no global pnpm is needed.
// Tools started under it (turbo looks for a `pnpm` binary) find one on PATH: a shim that calls
// corepack, kept in ~/.cache/inference-cluster/bin.
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { delimiter, join } from "node:path";

const binDir = join(homedir(), ".cache", "inference-cluster", "bin");
const shim = join(binDir, "pnpm");
const body = '#!/bin/sh\nCOREPACK_ENABLE_DOWNLOAD_PROMPT=0 exec corepack pnpm "$@"\n';
if (!existsSync(shim) || readFileSync(shim, "utf8") !== body) {
  mkdirSync(binDir, { recursive: true });
  writeFileSync(shim, body);
  chmodSync(shim, 0o755);
}

const r = spawnSync("corepack", ["pnpm", ...process.argv.slice(2)], {
  stdio: "inherit",
  env: {
    ...process.env,
    COREPACK_ENABLE_DOWNLOAD_PROMPT: "0",
    PATH: `${binDir}${delimiter}${process.env.PATH ?? ""}`,
  },
});
process.exit(r.status ?? 1);
