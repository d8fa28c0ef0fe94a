// Loads the YAML file and environment into a frozen, fully defaulted Config.
// Called from main(), never at import time; every error names the offending key.
import { createPrivateKey, randomBytes, X509Certificate } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { homedir, hostname } from "node:os";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import type { z } from "zod";
import { ConfigSchema } from "./schema.ts";
import type { Config, ConfigInput, ResolvedTls, ResolvedToken, StagingConfig } from "./schema.ts";

export class ConfigError extends Error {
  readonly code = "invalid_config" as const;
  constructor(
    message: string,
    readonly issues: readonly string[] = [],
  ) {
    super(message);
    this.name = "ConfigError";
  }
}

export interface LoadOptions {
  /** Path of the YAML file; missing file is an error only when given explicitly. */
  readonly file?: string | undefined;
  /** Object merged over the file (used by the launcher and tests). */
  readonly overrides?: ConfigInput;
  readonly env?: NodeJS.ProcessEnv;
}

export function expandHome(p: string, home = homedir()): string {
  return p === "~" ? home : p.startsWith("~/") ? join(home, p.slice(2)) : p;
}

function formatIssues(error: z.ZodError): string[] {
  return error.issues.map((i) => {
    const key = i.path.length ? i.path.join(".") : "(root)";
    return `${key}: ${i.message}`;
  });
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Deep merge of plain objects; arrays and scalars from `b` replace those of `a`. */
export function deepMerge(a: unknown, b: unknown): unknown {
  if (!isObject(a) || !isObject(b)) return b === undefined ? a : b;
  const out: Record<string, unknown> = { ...a };
  for (const [k, v] of Object.entries(b)) out[k] = deepMerge(a[k], v);
  return out;
}

function deepFreeze<T>(o: T): T {
  if (isObject(o) || Array.isArray(o)) {
    for (const v of Object.values(o as object)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}

const LOG_LEVELS: readonly string[] = ConfigSchema.shape.logging
  .unwrap()
  .shape.level.unwrap().options;

function envOverrides(env: NodeJS.ProcessEnv): ConfigInput {
  const out: Record<string, Record<string, unknown>> = {};
  const warm = env.SERVICE_WARMUP_DEADLINE_SECONDS;
  if (warm !== undefined && warm !== "") {
    const n = Number(warm);
    if (!Number.isFinite(n) || n <= 0) {
      throw new ConfigError(
        `SERVICE_WARMUP_DEADLINE_SECONDS: expected a positive number of seconds, got "${warm}"`,
      );
    }
    out.engine = { ...out.engine, warmup_deadline_seconds: n };
  }
  if (env.SERVICE_ENGINE_SERVER_BIN) {
    out.engine = { ...out.engine, server_bin: env.SERVICE_ENGINE_SERVER_BIN };
  }
  if (env.NATS_SERVER_BIN) out.bus = { server_bin: env.NATS_SERVER_BIN };
  const level = env.LOG_LEVEL?.trim().toLowerCase();
  if (level) {
    if (!LOG_LEVELS.includes(level))
      throw new ConfigError(
        `LOG_LEVEL: expected one of ${LOG_LEVELS.join(", ")}, got "${env.LOG_LEVEL}"`,
      );
    out.logging = { level };
  }
  if (env.SERVICE_CLUSTER_SECRET) out.cluster = { secret: env.SERVICE_CLUSTER_SECRET };
  return out as ConfigInput;
}

/**
 * A config file's YAML as a mapping (nothing checked against the schema yet); a ConfigError naming
 * the file when it cannot be read, is not YAML, or its top level is not a mapping.
 */
export function readConfigFile(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(expandHome(file), "utf8");
  } catch (e) {
    throw new ConfigError(`config file ${file}: ${(e as Error).message}`);
  }
  let doc: unknown;
  try {
    doc = parseYaml(text) ?? {};
  } catch (e) {
    throw new ConfigError(`config file ${file}: invalid YAML: ${(e as Error).message}`);
  }
  if (!isObject(doc)) throw new ConfigError(`config file ${file}: top level must be a mapping`);
  return doc;
}

export function loadConfig(options: LoadOptions = {}): Config {
  const env = options.env ?? process.env;
  const file = options.file ?? env.SERVICE_CONFIG;
  const fileDoc = file ? readConfigFile(file) : {};
  const merged = deepMerge(deepMerge(fileDoc, options.overrides ?? {}), envOverrides(env));
  const parsed = ConfigSchema.safeParse(merged);
  if (!parsed.success) {
    const issues = formatIssues(parsed.error);
    throw new ConfigError(`invalid configuration: ${issues.join("; ")}`, issues);
  }
  const p = parsed.data;
  const secret = resolveSecret(p.cluster.secret, p.cluster.secret_file, p.cluster.peers.length);
  const tokens = p.auth.tokens.map((t, i): ResolvedToken => ({
    name: t.name,
    scopes: t.scopes,
    token: t.token ?? readSecretFile(t.token_file!, `auth.tokens.${i}.token_file`),
    ...(t.models ? { models: t.models } : {}),
    ...(t.limits ? { limits: t.limits } : {}),
  }));
  const bind = p.node.bind ?? p.node.host;
  if (tokens.length === 0 && !p.auth.allow_anonymous && !isLoopback(bind)) {
    throw new ConfigError(
      `auth.tokens: the API listens on ${bind} (beyond loopback) and no tokens are configured; ` +
        "add auth.tokens (see docs/operations.md) or set auth.allow_anonymous: true",
    );
  }
  const tls = resolveTls(p.tls, p.node.host, bind);
  const rotation = resolveRotationSecret(p.cluster, secret, tls !== null);
  const cfg: Config = {
    ...p,
    tls,
    node: { ...p.node, bind },
    cluster: {
      ...p.cluster,
      secret,
      rotation_secret: rotation,
      secret_generated: p.cluster.secret === undefined && p.cluster.secret_file === undefined,
    },
    auth: { tokens, allow_anonymous: p.auth.allow_anonymous },
  };
  cfg.node.name ??= hostname();
  cfg.node_cache_path = expandHome(cfg.node_cache_path);
  if (cfg.store_path) cfg.store_path = expandHome(cfg.store_path);
  cfg.tracing.dir = expandHome(cfg.tracing.dir);
  cfg.event_log.dir = expandHome(cfg.event_log.dir);
  cfg.bus.store_dir = expandHome(cfg.bus.store_dir);
  cfg.engine.runner_log_dir = expandHome(cfg.engine.runner_log_dir);
  cfg.model_store.hub_cache_path = expandHome(cfg.model_store.hub_cache_path);
  return deepFreeze(cfg);
}

/** True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost). */
export function isLoopback(address: string): boolean {
  return address === "localhost" || address === "::1" || /^127\.\d+\.\d+\.\d+$/.test(address);
}

/** Reads a secret file; refuses one that group or others can read (like ssh does for keys). */
function readSecretFile(path: string, key: string): string {
  const file = expandHome(path);
  let mode: number;
  let text: string;
  try {
    mode = statSync(file).mode;
    text = readFileSync(file, "utf8").trim();
  } catch (e) {
    throw new ConfigError(`${key}: ${(e as Error).message}`);
  }
  if ((mode & 0o077) !== 0) {
    throw new ConfigError(
      `${key}: ${file} has mode ${(mode & 0o777).toString(8)}; it holds a secret, so chmod 600 it`,
    );
  }
  if (text.length < 16) throw new ConfigError(`${key}: ${file} must hold at least 16 characters`);
  return text;
}

/**
 * The cluster secret: from `cluster.secret` (or SERVICE_CLUSTER_SECRET) or `cluster.secret_file`.
 * A lone node (no peers) without one gets a random secret for this process: nothing else joins it.
 */
function resolveSecret(
  secret: string | undefined,
  file: string | undefined,
  peers: number,
): string {
  if (secret !== undefined && file !== undefined)
    throw new ConfigError("cluster.secret_file: set either cluster.secret or cluster.secret_file");
  if (file !== undefined) return readSecretFile(file, "cluster.secret_file");
  if (secret !== undefined) return secret;
  if (peers > 0) {
    throw new ConfigError(
      "cluster.secret: a node with cluster.peers needs the cluster secret (cluster.secret_file, " +
        "cluster.secret or SERVICE_CLUSTER_SECRET); generate one with `openssl rand -hex 32`",
    );
  }
  return randomBytes(32).toString("hex");
}

/**
 * The second secret of a rotation window, when one is configured: not the secret itself, and only
 * with TLS, where bus routes authenticate by certificate (their password would follow the secret,
 * and nats-server accepts one route password only, so a rolling rotation would split the routes).
 */
function resolveRotationSecret(
  c: { rotation_secret?: string | undefined; rotation_secret_file?: string | undefined },
  secret: string,
  tls: boolean,
): string | undefined {
  if (c.rotation_secret !== undefined && c.rotation_secret_file !== undefined)
    throw new ConfigError(
      "cluster.rotation_secret_file: set either cluster.rotation_secret or cluster.rotation_secret_file",
    );
  const other =
    c.rotation_secret_file !== undefined
      ? readSecretFile(c.rotation_secret_file, "cluster.rotation_secret_file")
      : c.rotation_secret;
  if (other === undefined) return undefined;
  if (other === secret)
    throw new ConfigError(
      "cluster.rotation_secret: it is the cluster secret itself; during a rotation it holds the other one",
    );
  if (!tls)
    throw new ConfigError(
      "cluster.rotation_secret: rotating the cluster secret without a restart needs TLS (tls.*: bus " +
        "routes then authenticate by certificate); without it, restart every node with the new secret",
    );
  return other;
}

/**
 * The node's certificate, key and cluster CA, read and checked: all three or none; the key in a 0600
 * file; the certificate signed by the CA, in its validity period and valid for `node.host`. Without
 * them a node listening beyond loopback refuses to start unless `tls.allow_plaintext` says so.
 */
function resolveTls(
  t: z.output<typeof ConfigSchema>["tls"],
  host: string,
  bind: string,
): ResolvedTls | null {
  const given = [t.ca_file, t.cert_file, t.key_file].filter((f) => f !== undefined).length;
  if (given === 0) {
    if (!t.allow_plaintext && !isLoopback(bind))
      throw new ConfigError(
        `tls: the node listens on ${bind} (beyond loopback) without certificates; make them with ` +
          "`node scripts/make-secrets.mjs <dir> --node <name>=<host>` and set tls.ca_file, " +
          "tls.cert_file and tls.key_file (docs/operations.md), or set tls.allow_plaintext: true",
      );
    return null;
  }
  if (given !== 3)
    throw new ConfigError("tls: set all of tls.ca_file, tls.cert_file and tls.key_file, or none");
  const read = (file: string, key: string) => {
    try {
      return readFileSync(expandHome(file), "utf8");
    } catch (e) {
      throw new ConfigError(`${key}: ${(e as Error).message}`);
    }
  };
  const files = {
    ca_file: expandHome(t.ca_file!),
    cert_file: expandHome(t.cert_file!),
    key_file: expandHome(t.key_file!),
  };
  const ca = read(files.ca_file, "tls.ca_file");
  const cert = read(files.cert_file, "tls.cert_file");
  const key = readSecretFile(files.key_file, "tls.key_file");
  const parse = (pem: string, k: string) => {
    try {
      return new X509Certificate(pem);
    } catch (e) {
      throw new ConfigError(`${k}: not a PEM certificate (${(e as Error).message})`);
    }
  };
  // A bundle may hold several CAs (an old and a new one while the CA is rotated): any may sign.
  const blocks = ca.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [ca];
  const cas = blocks.map((b) => parse(b, "tls.ca_file"));
  const own = parse(cert, "tls.cert_file");
  if (!cas.every((c) => c.ca))
    throw new ConfigError(`tls.ca_file: ${files.ca_file} holds a certificate that is not a CA's`);
  if (!cas.some((c) => own.verify(c.publicKey)))
    throw new ConfigError(
      `tls.cert_file: ${files.cert_file} is not signed by the cluster CA in ${files.ca_file}`,
    );
  const now = Date.now();
  if (Date.parse(own.validTo) < now || Date.parse(own.validFrom) > now)
    throw new ConfigError(
      `tls.cert_file: ${files.cert_file} is valid from ${own.validFrom} to ${own.validTo} only`,
    );
  const forHost = /^[\d.]+$|:/.test(host) ? own.checkIP(host) : own.checkHost(host);
  if (forHost === undefined)
    throw new ConfigError(
      `tls.cert_file: ${files.cert_file} is not valid for node.host ${host} (${own.subjectAltName ?? "no subjectAltName"})`,
    );
  let matches: boolean;
  try {
    matches = own.checkPrivateKey(createPrivateKey(key));
  } catch (e) {
    throw new ConfigError(
      `tls.key_file: ${files.key_file}: not a PEM private key (${(e as Error).message})`,
    );
  }
  if (!matches)
    throw new ConfigError(
      `tls.key_file: ${files.key_file} is not the key of the certificate in ${files.cert_file}`,
    );
  return { ...files, ca, cert, key };
}

/** The staging section for one node: the base section with that node's override applied. */
export function stagingFor(cfg: Config, nodeName: string): StagingConfig {
  const o = cfg.node_overrides[nodeName]?.model_store?.staging ?? {};
  const defined = Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
  return Object.freeze({ ...cfg.model_store.staging, ...defined });
}
