#!/usr/bin/env node
// Makes the cluster secret and the API tokens a deployment needs, each in its own mode-0600 file:
// `node scripts/make-secrets.mjs <dir>` (existing files are kept, so it is safe to run again).
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const dir = process.argv[2];
if (!dir) {
  process.stderr.write("usage: node scripts/make-secrets.mjs <dir>\n");
  process.exit(2);
}
mkdirSync(dir, { recursive: true, mode: 0o700 });
const files = {
  "cluster.secret": () => randomBytes(32).toString("hex"),
  "admin.token": () => `ica_${randomBytes(24).toString("base64url")}`,
  "read.token": () => `icr_${randomBytes(24).toString("base64url")}`,
  "inference.token": () => `ici_${randomBytes(24).toString("base64url")}`,
};
for (const [name, make] of Object.entries(files)) {
  const path = join(dir, name);
  if (existsSync(path)) {
    process.stdout.write(`kept ${path}\n`);
    continue;
  }
  writeFileSync(path, `${make()}\n`, { mode: 0o600, flag: "wx" });
  process.stdout.write(`wrote ${path} (mode 600)\n`);
}
