// Publisher configuration from the environment -> zod -> frozen object, loaded in main() only.
// The hub token is not part of it: it goes straight to the TokenStore and is never logged.
import { accessSync, constants, statSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { _JOB_RETENTION_SECONDS, MAX_CONCURRENT_JOBS } from "./jobs.ts";

export const TOOL_NAME = "weights-publisher";
const PACKAGE_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const BUILTIN_CATALOG = join(PACKAGE_ROOT, "catalog", "catalog.yaml");
export const PUBLIC_DIR = join(PACKAGE_ROOT, "public");
export const DEFAULT_PORT = 7861;

export interface PublisherConfig {
  /** Loopback port; 0 picks a free one. The bind address is always 127.0.0.1. */
  readonly port: number;
  /** Holds `.env` with HF_TOKEN: `~/.config/weights-publisher` unless PUBLISHER_CONFIG_DIR. */
  readonly configDir: string;
  /** Model-hub endpoint (HF_ENDPOINT); huggingface.co when undefined. */
  readonly hubUrl: string | undefined;
  readonly catalogPath: string;
  readonly retentionMs: number;
  readonly maxJobs: number;
  /** Parent of per-job scratch directories: an existing directory, checked at load. */
  readonly workDir: string;
  readonly logLevel: string;
}

const EnvSchema = z.object({
  PUBLISHER_PORT: z.coerce.number().int().min(0).max(65535).default(DEFAULT_PORT),
  PUBLISHER_CONFIG_DIR: z.string().optional(),
  HF_ENDPOINT: z.url({ protocol: /^https?$/ }).optional(),
  PUBLISHER_CATALOG: z.string().optional(),
  PUBLISHER_JOB_RETENTION_SECONDS: z.coerce.number().positive().default(_JOB_RETENTION_SECONDS),
  PUBLISHER_MAX_JOBS: z.coerce.number().int().positive().default(MAX_CONCURRENT_JOBS),
  PUBLISHER_WORK_DIR: z.string().optional(),
  LOG_LEVEL: z
    .string()
    .transform((v) => v.toLowerCase())
    .pipe(z.enum(["fatal", "error", "warn", "info", "debug", "trace", "silent"]))
    .default("info"),
});

export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

/** Why `path` cannot be the work directory, or null when it is an existing, writable directory. */
function notADirectory(path: string): string | null {
  try {
    if (!statSync(path).isDirectory()) return "is not a directory";
    accessSync(path, constants.W_OK | constants.X_OK);
    return null;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return "does not exist";
    if (code === "EACCES") return "is not writable";
    return `cannot be used (${code ?? "error"})`;
  }
}

export function loadConfig(env: Readonly<Record<string, string | undefined>>): PublisherConfig {
  // Empty variables count as unset.
  const present = Object.fromEntries(
    Object.entries(env).filter(([, v]) => v !== undefined && v !== ""),
  );
  const parsed = EnvSchema.safeParse(present);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new ConfigError(
      `invalid environment variable ${String(issue?.path[0] ?? "?")}: ${issue?.message ?? "invalid"}`,
    );
  }
  const e = parsed.data;
  // Checked here, not at the first publish: a bad work dir stops the program at startup.
  const workDir = resolve(e.PUBLISHER_WORK_DIR ?? tmpdir());
  const workDirProblem = notADirectory(workDir);
  if (workDirProblem) {
    throw new ConfigError(
      `invalid environment variable PUBLISHER_WORK_DIR: ${workDir} ${workDirProblem}`,
    );
  }
  return Object.freeze({
    port: e.PUBLISHER_PORT,
    configDir: resolve(e.PUBLISHER_CONFIG_DIR ?? join(homedir(), ".config", TOOL_NAME)),
    hubUrl: e.HF_ENDPOINT?.replace(/\/+$/, ""),
    catalogPath: resolve(e.PUBLISHER_CATALOG ?? BUILTIN_CATALOG),
    retentionMs: e.PUBLISHER_JOB_RETENTION_SECONDS * 1000,
    maxJobs: e.PUBLISHER_MAX_JOBS,
    workDir,
    logLevel: e.LOG_LEVEL,
  });
}
