#!/usr/bin/env node
// Builds llama-server and ggml-rpc-server from the llama.cpp source bundled in node-llama-cpp.
// Dependency-free (runs before `pnpm install`); caches per bundle commit and backend, so reruns are instant.
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync, readdirSync } from "node:fs";
import { homedir, cpus } from "node:os";
import { join } from "node:path";

export const NODE_LLAMA_CPP_VERSION = "3.22.1";
const TARGETS = ["llama-server", "ggml-rpc-server"];

function log(msg) {
  process.stderr.write(`[engine] ${msg}\n`);
}

export function engineCacheRoot() {
  const base = process.env.XDG_CACHE_HOME || join(homedir(), ".cache");
  return process.env.ENGINE_CACHE_DIR || join(base, "inference-cluster", "engine");
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: opts.quiet ? "pipe" : ["ignore", "inherit", "inherit"], ...opts });
  if (r.status !== 0) {
    const err = r.stderr ? r.stderr.toString() : "";
    throw new Error(`${cmd} ${args.join(" ")} failed with status ${r.status}\n${err}`);
  }
  return r.stdout ? r.stdout.toString() : "";
}

function has(cmd) {
  return spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;
}

/** CUDA when nvcc and an NVIDIA GPU are both present, Metal on macOS, else CPU. */
export function detectBackend() {
  if (process.env.ENGINE_BACKEND) return process.env.ENGINE_BACKEND;
  if (process.platform === "darwin") return "metal";
  if (has("nvcc") && has("nvidia-smi")) {
    const r = spawnSync("nvidia-smi", ["-L"], { stdio: "pipe" });
    if (r.status === 0 && /GPU \d/.test(r.stdout.toString())) return "cuda";
  }
  return "cpu";
}

function fetchBundle(root) {
  const srcDir = join(root, "src");
  mkdirSync(srcDir, { recursive: true });
  const bundle = join(srcDir, `node-llama-cpp-${NODE_LLAMA_CPP_VERSION}.bundle`);
  if (existsSync(bundle)) return bundle;
  log(`fetching node-llama-cpp@${NODE_LLAMA_CPP_VERSION} (npm pack, ~35 MB)`);
  const tmp = join(srcDir, `pack-${process.pid}`);
  mkdirSync(tmp, { recursive: true });
  try {
    const out = run("npm", ["pack", `node-llama-cpp@${NODE_LLAMA_CPP_VERSION}`, "--silent"], { cwd: tmp, quiet: true });
    const tgz = out.trim().split("\n").pop();
    run("tar", ["-xzf", join(tmp, tgz), "-C", tmp, "package/llama/gitRelease.bundle"], { quiet: true });
    renameSync(join(tmp, "package/llama/gitRelease.bundle"), bundle);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  return bundle;
}

export function bundleCommit(bundle) {
  const heads = execFileSync("git", ["bundle", "list-heads", bundle]).toString().trim();
  return heads.split(/\s+/)[0];
}

function cmakeArgs(backend) {
  const args = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_RPC=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
  ];
  if (backend === "cuda") args.push("-DGGML_CUDA=ON");
  if (backend === "metal") args.push("-DGGML_METAL=ON");
  return args;
}

/** Returns the manifest of a complete build, building it first if needed. */
export function ensureEngine({ quiet = false } = {}) {
  const root = engineCacheRoot();
  const backend = detectBackend();
  const bundle = fetchBundle(root);
  const commit = bundleCommit(bundle);
  const key = `${commit.slice(0, 12)}-${backend}`;
  const dir = join(root, key);
  const manifestPath = join(dir, "manifest.json");
  if (existsSync(manifestPath)) {
    const m = JSON.parse(readFileSync(manifestPath, "utf8"));
    if (TARGETS.every((t) => existsSync(m.binaries[t]))) {
      if (!quiet) log(`cached build ${key} at ${dir}`);
      writeCurrent(root, m);
      return m;
    }
  }
  const src = join(dir, "llama.cpp");
  if (!existsSync(join(src, "CMakeLists.txt"))) {
    rmSync(src, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    log(`cloning bundle ${commit.slice(0, 12)}`);
    run("git", ["clone", "--quiet", bundle, src], { quiet: true });
  }
  const build = join(dir, "build");
  const jobs = String(Math.max(1, cpus().length));
  log(`configuring (${backend})`);
  run("cmake", ["-S", src, "-B", build, ...cmakeArgs(backend)], { quiet: true });
  log(`building ${TARGETS.join(", ")} with ${jobs} jobs (about 6 minutes on 2 cores, once per bundle commit)`);
  const started = Date.now();
  run("cmake", ["--build", build, "--target", ...TARGETS, "-j", jobs], {
    stdio: ["ignore", quiet ? "ignore" : "inherit", "inherit"],
  });
  const binDir = join(build, "bin");
  const manifest = {
    commit,
    backend,
    nodeLlamaCppVersion: NODE_LLAMA_CPP_VERSION,
    builtAt: new Date().toISOString(),
    binaries: Object.fromEntries(TARGETS.map((t) => [t, join(binDir, t)])),
  };
  for (const t of TARGETS) if (!existsSync(manifest.binaries[t])) throw new Error(`build produced no ${t}`);
  writeFileSync(manifestPath, JSON.stringify(manifest, null, 2));
  writeCurrent(root, manifest);
  log(`built in ${Math.round((Date.now() - started) / 1000)} s`);
  return manifest;
}

function writeCurrent(root, manifest) {
  const p = join(root, "current.json");
  const tmp = `${p}.${process.pid}`;
  writeFileSync(tmp, JSON.stringify(manifest, null, 2));
  renameSync(tmp, p);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  try {
    const m = ensureEngine();
    process.stdout.write(JSON.stringify(m.binaries) + "\n");
  } catch (e) {
    log(e instanceof Error ? e.message : String(e));
    process.exit(1);
  }
}
