#!/usr/bin/env node
// Installs whatever is missing for `npm start`, `npm test` or `npm run publisher` (`--for=`, see
// setup-plan.mjs): apt packages, pnpm (corepack), workspace dependencies (frozen lockfile) and the
// llama.cpp engine build. Idempotent and quick when done.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readlinkSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { homedir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureEngine } from "./build-engine.mjs";
import {
  CONTAINERS_CONF,
  CONTAINERS_CONF_MARK,
  icLinkDir,
  setupPlan,
  USAGE,
} from "./setup-plan.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
let plan;
try {
  plan = setupPlan(process.argv.slice(2));
} catch (e) {
  const why = e instanceof Error ? e.message : String(e);
  process.stderr.write(`[setup] ${why} (see: node scripts/setup.mjs --help)\n`);
  process.exit(2);
}
if (plan.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const env = { ...process.env, COREPACK_ENABLE_DOWNLOAD_PROMPT: "0" };

function log(msg) {
  process.stderr.write(`[setup] ${msg}\n`);
}

function sh(cmd, opts = {}) {
  return spawnSync("sh", ["-c", cmd], { stdio: "inherit", env, cwd: root, ...opts });
}

function has(cmd) {
  if (cmd.startsWith("/")) return existsSync(cmd);
  return spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;
}

function must(cmd, what) {
  const r = sh(cmd);
  if (r.status !== 0) {
    log(`${what} failed (exit ${r.status}): ${cmd}`);
    process.exit(1);
  }
}

// 1. Debian packages this use needs (chromium only for the tests), those whose command is missing.
const missing = plan.debian.filter(([cmd]) => !has(cmd)).map(([, pkg]) => pkg);
if (missing.length > 0) {
  const sudo = process.getuid && process.getuid() === 0 ? "" : "sudo -n ";
  log(`installing Debian packages: ${missing.join(" ")}`);
  must(`${sudo}apt-get update -qq`, "apt-get update");
  must(
    `DEBIAN_FRONTEND=noninteractive ${sudo}apt-get install -y -qq --no-install-recommends ${missing.join(" ")} >/dev/null`,
    "apt-get install",
  );
}

// 1b. podman's settings where the host has none, or has an older setup's (setup-plan.mjs
// CONTAINERS_CONF).
const containersConf = "/etc/containers/containers.conf";
const confNow = existsSync(containersConf) ? readFileSync(containersConf, "utf8") : undefined;
const ownConf = confNow === undefined || confNow.startsWith(CONTAINERS_CONF_MARK);
if (plan.containersConf && has("podman") && ownConf && confNow !== CONTAINERS_CONF) {
  try {
    mkdirSync(dirname(containersConf), { recursive: true });
    writeFileSync(containersConf, CONTAINERS_CONF);
    log(`wrote ${containersConf} (runc, cgroupfs, no default ulimits, netavark)`);
  } catch (e) {
    log(`could not write ${containersConf}: ${e instanceof Error ? e.message : String(e)}`);
  }
}

// 2. pnpm through corepack (version pinned by package.json "packageManager").
// Older corepack releases lack the registry's current signing keys; upgrade corepack then.
if (plan.workspace && sh("corepack pnpm --version", { stdio: "ignore" }).status !== 0) {
  log("pnpm through corepack failed; upgrading corepack from the npm registry");
  const sudo = process.getuid && process.getuid() === 0 ? "" : "sudo -n ";
  must(`${sudo}npm install -g --silent corepack@latest`, "corepack upgrade");
  must("corepack pnpm --version >/dev/null", "corepack pnpm");
}

// 3. Workspace dependencies, reinstalled only when the lockfile changed.
const lock = readFileSync(join(root, "pnpm-lock.yaml"));
const lockHash = createHash("sha256").update(lock).digest("hex");
const marker = join(root, "node_modules", ".setup-lock-hash");
if (plan.workspace && (!existsSync(marker) || readFileSync(marker, "utf8") !== lockHash)) {
  log("installing dependencies (pnpm install --frozen-lockfile)");
  must("corepack pnpm install --frozen-lockfile --reporter=append-only", "pnpm install");
  writeFileSync(marker, lockHash);
}

// 4. The engine (llama-server, ggml-rpc-server), cached per bundle commit and variant
// (ENGINE_PORTABLE=1: any CPU of this architecture). The terminal gets cmake's percentage; the
// compiler output goes to the build log, whose tail and path a failure prints.
if (plan.engine) {
  try {
    await ensureEngine({ quiet: true });
  } catch (e) {
    log(`engine build failed: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  }
}

// 5. The ic command on PATH: a link to this checkout's services/cli/bin/ic.mjs.
const linkDir = icLinkDir(plan.mode, process.env, process.getuid?.() === 0, homedir());
if (linkDir) {
  const target = join(root, "services", "cli", "bin", "ic.mjs");
  const link = join(linkDir, "ic");
  let current;
  try {
    current = lstatSync(link).isSymbolicLink() ? readlinkSync(link) : "(a file)";
  } catch {
    current = undefined;
  }
  if (current === undefined) {
    try {
      mkdirSync(linkDir, { recursive: true });
      symlinkSync(target, link);
      log(`linked ${link} -> ${target}`);
      if (!(process.env.PATH ?? "").split(delimiter).includes(linkDir))
        log(`${linkDir} is not on PATH: add it to run ic directly (npm run ic -- works anyway)`);
    } catch (e) {
      log(
        `could not link ic into ${linkDir} (${e instanceof Error ? e.message : String(e)}); use npm run ic --`,
      );
    }
  } else if (current !== target) {
    log(`${link} exists and is not this checkout's (${current}); left alone`);
  }
}
