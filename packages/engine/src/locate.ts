// Finds the engine binaries (managed build or SERVICE_ENGINE_SERVER_BIN override) and checks they run.
// An unusable override is reported, never silently replaced by the managed build.
import { execa } from "execa";
import { accessSync, constants, existsSync, readFileSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import type { EngineInfo } from "@ic/protocol";

export interface ManagedBuild {
  readonly commit: string;
  readonly backend: "cpu" | "cuda" | "metal";
  readonly binaries: { readonly "llama-server": string; readonly "ggml-rpc-server": string };
}

export function engineCacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CACHE_HOME || join(homedir(), ".cache");
  return env.ENGINE_CACHE_DIR || join(base, "inference-cluster", "engine");
}

/**
 * Where the engine probes keep their verdicts: `ENGINE_PROBE_CACHE_DIR`, else the engine cache. A
 * deployed engine is read-only to the node (the image, the systemd unit), and a probe whose verdict
 * cannot be written runs again at every start (seconds of engine starts): those name a directory the
 * node owns.
 */
export function probeCacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  return env.ENGINE_PROBE_CACHE_DIR || engineCacheRoot(env);
}

/** The build recorded by scripts/build-engine.mjs, or null when none was made. */
export function managedBuild(env: NodeJS.ProcessEnv = process.env): ManagedBuild | null {
  const p = join(engineCacheRoot(env), "current.json");
  if (!existsSync(p)) return null;
  try {
    return JSON.parse(readFileSync(p, "utf8")) as ManagedBuild;
  } catch {
    return null;
  }
}

function executableProblem(path: string): string | null {
  if (!existsSync(path)) return `${path} does not exist`;
  if (!statSync(path).isFile()) return `${path} is not a file`;
  try {
    accessSync(path, constants.X_OK);
  } catch {
    return `${path} is not executable`;
  }
  return null;
}

/** Backends a binary can serve with, from `--list-devices` (CUDA0, Metal, ...). */
async function probeBackend(
  bin: string,
): Promise<{ ok: boolean; backend: EngineInfo["backend"]; problem?: string }> {
  const r = await execa(bin, ["--list-devices"], { reject: false, timeout: 15_000, all: true });
  if (r.exitCode !== 0 || r.timedOut) {
    const tail = (r.all ?? "").split("\n").slice(-3).join(" ").trim();
    return {
      ok: false,
      backend: "unknown",
      problem: `${bin} --list-devices failed (exit ${r.exitCode ?? "timeout"}): ${tail}`,
    };
  }
  const out = r.all ?? "";
  if (/\bCUDA\d/.test(out)) return { ok: true, backend: "cuda" };
  if (/\bMTL\d|Metal/.test(out)) return { ok: true, backend: "metal" };
  return { ok: true, backend: "cpu" };
}

export interface LocateOptions {
  readonly serverBinOverride?: string | undefined;
  readonly rpcBinOverride?: string | undefined;
  readonly env?: NodeJS.ProcessEnv;
}

export async function locateEngine(opts: LocateOptions = {}): Promise<EngineInfo> {
  const managed = managedBuild(opts.env);
  const overridden = Boolean(opts.serverBinOverride);
  const serverBin = opts.serverBinOverride ?? managed?.binaries["llama-server"] ?? null;
  const rpcBin = opts.rpcBinOverride ?? managed?.binaries["ggml-rpc-server"] ?? null;
  if (!serverBin) {
    return {
      server_bin: null,
      rpc_bin: rpcBin,
      backend: "unknown",
      usable: false,
      overridden,
      problem: "no engine build found; run `npm start` or scripts/build-engine.mjs",
    };
  }
  const problem = executableProblem(serverBin);
  if (problem)
    return {
      server_bin: serverBin,
      rpc_bin: rpcBin,
      backend: "unknown",
      usable: false,
      overridden,
      problem,
    };
  if (!overridden && managed) {
    return {
      server_bin: serverBin,
      rpc_bin: rpcBin,
      backend: managed.backend,
      usable: true,
      overridden,
    };
  }
  const probe = await probeBackend(serverBin);
  return {
    server_bin: serverBin,
    rpc_bin: rpcBin,
    backend: probe.backend,
    usable: probe.ok,
    overridden,
    ...(probe.problem ? { problem: probe.problem } : {}),
  };
}
