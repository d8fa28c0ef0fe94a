#!/usr/bin/env node
// Builds llama-server and ggml-rpc-server from the llama.cpp source bundled in node-llama-cpp.
// Dependency-free (runs before `pnpm install`); caches per bundle commit and variant, so reruns are
// instant. cmake's whole output (compiler warnings included) goes to a log file in the build's cache
// directory: the terminal shows the percentage, the log's path, and the log's tail when a step fails.
import { execFileSync, spawn, spawnSync } from "node:child_process";
import {
  createWriteStream,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { homedir, cpus } from "node:os";
import { dirname, join } from "node:path";

export const NODE_LLAMA_CPP_VERSION = "3.22.1";
const TARGETS = ["llama-server", "ggml-rpc-server"];
/** Lines of the build log shown when a step fails. */
const TAIL_LINES = 40;

function log(msg) {
  process.stderr.write(`[engine] ${msg}\n`);
}

export function engineCacheRoot() {
  const base = process.env.XDG_CACHE_HOME || join(homedir(), ".cache");
  return process.env.ENGINE_CACHE_DIR || join(base, "inference-cluster", "engine");
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, {
    stdio: opts.quiet ? "pipe" : ["ignore", "inherit", "inherit"],
    ...opts,
  });
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

/**
 * ENGINE_PORTABLE: a build that runs on any CPU of the architecture (images), instead of one tuned
 * for the CPU it was built on. Unset, empty, 0/false/no/off: native.
 */
export function isPortable(env = process.env) {
  const v = (env.ENGINE_PORTABLE ?? "").trim().toLowerCase();
  if (["", "0", "false", "no", "off"].includes(v)) return false;
  if (["1", "true", "yes", "on"].includes(v)) return true;
  throw new Error(`ENGINE_PORTABLE: expected 1 or 0, got "${env.ENGINE_PORTABLE}"`);
}

/** The cache directory's suffix: the backend, and `-portable` for a portable build. */
export function engineVariant({ backend, portable }) {
  return portable ? `${backend}-portable` : backend;
}

/**
 * Whether the llama.cpp source can build every CPU variant as a loadable backend
 * (GGML_CPU_ALL_VARIANTS with GGML_BACKEND_DL; Linux on the architectures ggml lists for it).
 */
export function supportsAllVariants(src, platform = process.platform, arch = process.arch) {
  const file = join(src, "ggml", "CMakeLists.txt");
  if (!existsSync(file)) return false;
  const text = readFileSync(file, "utf8");
  const options =
    /option\(\s*GGML_CPU_ALL_VARIANTS\b/.test(text) && /option\(\s*GGML_BACKEND_DL\b/.test(text);
  return (
    options && platform === "linux" && ["x64", "arm64", "ppc64", "s390x", "riscv64"].includes(arch)
  );
}

/**
 * cmake's configure arguments. Native builds let ggml tune for this CPU (GGML_NATIVE defaults on).
 * Portable builds turn GGML_NATIVE off and build every CPU variant as a shared backend that
 * llama-server picks at start for the CPU it finds; where the source cannot, they build for the
 * architecture's baseline (on x86-64: no AVX, which GGML_NATIVE=OFF would otherwise switch on).
 */
export function cmakeArgs({ backend, portable = false, allVariants = false, arch = process.arch }) {
  const args = [
    "-DCMAKE_BUILD_TYPE=Release",
    `-DBUILD_SHARED_LIBS=${portable && allVariants ? "ON" : "OFF"}`,
    "-DGGML_RPC=ON",
    "-DLLAMA_CURL=OFF",
    // HTTPS for llama-server (engine traffic between nodes); without OpenSSL found, a plain build.
    "-DLLAMA_OPENSSL=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
  ];
  if (portable) {
    args.push("-DGGML_NATIVE=OFF");
    if (allVariants) args.push("-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON");
    else if (arch === "x64")
      for (const f of ["AVX", "AVX2", "FMA", "F16C", "BMI2"]) args.push(`-DGGML_${f}=OFF`);
  }
  if (backend === "cuda") args.push("-DGGML_CUDA=ON");
  if (backend === "metal") args.push("-DGGML_METAL=ON");
  return args;
}

/** The build progress an output line of `cmake --build` reports (Makefiles `[ 42%]`, Ninja `[12/345]`). */
export function progressOf(line) {
  const pct = /^\[\s*(\d{1,3})%\]/.exec(line);
  if (pct) return Math.min(100, Number(pct[1]));
  const steps = /^\[(\d+)\/(\d+)\]/.exec(line);
  if (steps && Number(steps[2]) > 0) return Math.floor((100 * Number(steps[1])) / Number(steps[2]));
  return null;
}

/**
 * Shows the build's percentage: on a terminal one line rewritten in place, elsewhere (CI, docker
 * build, a pipe) a line each time another 10% is done. It never goes back (parallel make reports
 * per target).
 */
export function progressPrinter({ write, tty, label, now = Date.now }) {
  const started = now();
  let shown = -1;
  const elapsed = () => {
    const s = Math.round((now() - started) / 1000);
    return s >= 60 ? `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s` : `${s}s`;
  };
  return {
    update(pct) {
      if (tty) {
        if (pct <= shown) return;
        shown = pct;
        write(`\r\x1b[K[engine] ${label}: ${pct}% (${elapsed()})`);
      } else {
        const step = Math.floor(pct / 10) * 10;
        if (step <= shown) return;
        shown = step;
        write(`[engine] ${label}: ${step}% (${elapsed()})\n`);
      }
    },
    end() {
      if (tty && shown >= 0) write("\n");
    },
  };
}

/** The last `n` lines of a file ("" when it cannot be read). */
export function tailOf(file, n = TAIL_LINES) {
  try {
    const lines = readFileSync(file, "utf8").split("\n");
    if (lines.at(-1) === "") lines.pop();
    return lines.slice(-n).join("\n");
  } catch {
    return "";
  }
}

/**
 * Runs a command with its stdout and stderr appended, line by line, to the log; resolves to its exit
 * status (`spawnError` when it could not be started at all).
 */
function runLogged(cmd, args, { out, onLine, env }) {
  return new Promise((resolve) => {
    out.write(`$ ${[cmd, ...args].join(" ")}\n`);
    const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"], env });
    const pump = (stream) =>
      new Promise((done) => {
        let rest = "";
        stream.setEncoding("utf8");
        stream.on("data", (chunk) => {
          const lines = (rest + chunk).split("\n");
          rest = lines.pop();
          for (const line of lines) {
            out.write(`${line}\n`);
            onLine?.(line);
          }
        });
        stream.on("end", () => {
          if (rest) {
            out.write(`${rest}\n`);
            onLine?.(rest);
          }
          done();
        });
      });
    const pumped = Promise.all([pump(child.stdout), pump(child.stderr)]);
    child.on("error", (e) => {
      out.write(`could not run ${cmd}: ${e.message}\n`);
      resolve({ code: null, signal: null, spawnError: e.message });
    });
    child.on("close", (code, signal) => void pumped.then(() => resolve({ code, signal })));
  });
}

/** A failed build step: the message names the log and carries its tail. */
export class BuildError extends Error {
  constructor(step, status, logFile) {
    const tail = tailOf(logFile);
    super(
      `${step} failed (${status}); the last lines of ${logFile}:\n${tail}\nfull log: ${logFile}`,
    );
    this.name = "BuildError";
    this.logFile = logFile;
    this.tail = tail;
  }
}

/**
 * Configures and builds `targets` of the CMake project in `src` into `build`, one target after the
 * other (make reports each goal's own percentage, so two goals at once would make it jump back).
 * Everything cmake and the compilers print goes to `logFile` (written afresh); `write` only gets
 * the log's path and each target's percentage. Rejects with a BuildError (log tail and path) when a
 * step fails.
 */
export async function cmakeBuild({
  src,
  build,
  configureArgs = [],
  targets,
  jobs = Math.max(1, cpus().length),
  logFile,
  write = (s) => process.stderr.write(s),
  tty = Boolean(process.stderr.isTTY),
  env = process.env,
}) {
  mkdirSync(dirname(logFile), { recursive: true });
  const out = createWriteStream(logFile, { flags: "w" });
  await new Promise((resolve, reject) => out.once("open", resolve).once("error", reject));
  const closeLog = () => new Promise((resolve) => out.end(resolve));
  const failed = async (step, r) => {
    await closeLog();
    const status = r.spawnError ?? (r.signal ? `signal ${r.signal}` : `exit ${r.code}`);
    return new BuildError(step, status, logFile);
  };
  write(`[engine] full cmake and compiler output: ${logFile}\n`);
  const configured = await runLogged("cmake", ["-S", src, "-B", build, ...configureArgs], {
    out,
    env,
  });
  if (configured.code !== 0) throw await failed("cmake configure", configured);
  for (const target of targets) {
    const progress = progressPrinter({ write, tty, label: `building ${target}` });
    let built;
    try {
      built = await runLogged("cmake", ["--build", build, "--target", target, "-j", String(jobs)], {
        out,
        env,
        onLine: (line) => {
          const pct = progressOf(line);
          if (pct !== null) progress.update(pct);
        },
      });
    } finally {
      progress.end();
    }
    if (built.code !== 0) throw await failed(`cmake build of ${target}`, built);
  }
  await closeLog();
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
    const out = run("npm", ["pack", `node-llama-cpp@${NODE_LLAMA_CPP_VERSION}`, "--silent"], {
      cwd: tmp,
      quiet: true,
    });
    const tgz = out.trim().split("\n").pop();
    run("tar", ["-xzf", join(tmp, tgz), "-C", tmp, "package/llama/gitRelease.bundle"], {
      quiet: true,
    });
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

/**
 * Returns the manifest of a complete build, building it first if needed. The variant comes from
 * the backend (detected, or ENGINE_BACKEND) and ENGINE_PORTABLE.
 */
export async function ensureEngine({ quiet = false, env = process.env } = {}) {
  const root = engineCacheRoot();
  const backend = detectBackend();
  const portable = isPortable(env);
  const variant = engineVariant({ backend, portable });
  const bundle = fetchBundle(root);
  const commit = bundleCommit(bundle);
  // `-ssl`: built with OpenSSL (LLAMA_OPENSSL=ON), so a build cached before that is not reused.
  const key = `${commit.slice(0, 12)}-${variant}-ssl`;
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
  const jobs = Math.max(1, cpus().length);
  const allVariants = portable && supportsAllVariants(src);
  const args = cmakeArgs({ backend, portable, allVariants });
  log(
    `building ${TARGETS.join(", ")} (${variant}${allVariants ? ", every CPU variant" : ""}) with ${jobs} jobs: ` +
      (portable
        ? "a portable build takes several times longer than a native one"
        : "about 6 minutes on 2 cores, once per bundle commit"),
  );
  const started = Date.now();
  await cmakeBuild({
    src,
    build,
    configureArgs: args,
    targets: TARGETS,
    jobs,
    logFile: join(dir, "build.log"),
    env,
  });
  const binDir = join(build, "bin");
  const manifest = {
    commit,
    backend,
    variant,
    portable,
    nodeLlamaCppVersion: NODE_LLAMA_CPP_VERSION,
    builtAt: new Date().toISOString(),
    binaries: Object.fromEntries(TARGETS.map((t) => [t, join(binDir, t)])),
  };
  for (const t of TARGETS)
    if (!existsSync(manifest.binaries[t])) throw new Error(`build produced no ${t}`);
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
    const m = await ensureEngine();
    process.stdout.write(JSON.stringify(m.binaries) + "\n");
  } catch (e) {
    log(e instanceof Error ? e.message : String(e));
    process.exit(1);
  }
}
