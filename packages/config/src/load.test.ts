import { execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  ConfigError,
  MAX_STAGING_GB,
  clusterCredentials,
  isLoopback,
  loadConfig,
  stagingFor,
} from "./index.ts";

function file(text: string): string {
  const dir = mkdtempSync(join(tmpdir(), "cfg-"));
  const p = join(dir, "config.yaml");
  writeFileSync(p, text);
  return p;
}

describe("loadConfig", () => {
  it("fills every default of the spec", () => {
    const c = loadConfig({ env: {} });
    expect(c.model_store.staging).toEqual({
      cleanup_on_deactivate: true,
      staging_keep_recent_gb: 40,
      headroom_gb: 10,
    });
    expect(c.node_cache_path.endsWith(".service/staging")).toBe(true);
    expect(c.tracing.retention_days).toBe(3);
    expect(c.engine.warmup_deadline_seconds).toBe(300);
    expect(c.cluster.election_timeout_ms).toBe(3000);
    expect(c.cluster.heartbeat_ms).toBe(2000);
    expect(c.cluster.info_pending_wait_ms).toBe(15000);
    expect(c.logging.enabled).toBe(true);
    expect(Object.isFrozen(c.model_store.staging)).toBe(true);
  });

  it("reads YAML and applies node overrides to the staging section", () => {
    const p = file(`
node: { name: store-a }
store_path: /srv/models
model_store:
  staging: { staging_keep_recent_gb: 5 }
node_overrides:
  store-a:
    model_store: { staging: { cleanup_on_deactivate: false } }
`);
    const c = loadConfig({ file: p, env: {} });
    expect(stagingFor(c, "store-a")).toMatchObject({
      cleanup_on_deactivate: false,
      staging_keep_recent_gb: 5,
    });
    expect(stagingFor(c, "other")).toMatchObject({ cleanup_on_deactivate: true });
  });

  it("names the key in validation errors", () => {
    const p = file("model_store:\n  staging:\n    staging_keep_recent_gb: lots\n");
    expect(() => loadConfig({ file: p, env: {} })).toThrowError(
      /model_store\.staging\.staging_keep_recent_gb/,
    );
  });

  it.each([
    ["model_store:\n  staging:\n    headroom_gb: 1e300\n", /model_store\.staging\.headroom_gb/],
    [
      "model_store:\n  staging:\n    staging_keep_recent_gb: 2000000\n",
      /model_store\.staging\.staging_keep_recent_gb/,
    ],
    [
      "node_overrides:\n  a:\n    model_store:\n      staging:\n        headroom_gb: 9e15\n",
      /node_overrides\.a\.model_store\.staging\.headroom_gb/,
    ],
  ])("refuses staging sizes whose byte count is not an exact integer: %s", (text, key) => {
    expect(() => loadConfig({ file: file(text), env: {} })).toThrowError(key);
  });

  it("accepts the largest staging size and keeps it exact in bytes", () => {
    const c = loadConfig({
      file: file(`model_store:\n  staging:\n    headroom_gb: ${MAX_STAGING_GB}\n`),
      env: {},
    });
    expect(Number.isSafeInteger(c.model_store.staging.headroom_gb * 1024 ** 3)).toBe(true);
  });

  it("rejects unknown keys instead of ignoring typos", () => {
    const p = file("loging: { enabled: false }\n");
    expect(() => loadConfig({ file: p, env: {} })).toThrowError(ConfigError);
  });

  it("takes the warmup deadline and engine binary from the environment", () => {
    const c = loadConfig({
      env: { SERVICE_WARMUP_DEADLINE_SECONDS: "7", SERVICE_ENGINE_SERVER_BIN: "/opt/ls" },
    });
    expect(c.engine.warmup_deadline_seconds).toBe(7);
    expect(c.engine.server_bin).toBe("/opt/ls");
  });

  it("takes the log level from LOG_LEVEL over logging.level, and names LOG_LEVEL when it is wrong", () => {
    expect(loadConfig({ env: { LOG_LEVEL: "debug" } }).logging.level).toBe("debug");
    expect(
      loadConfig({ overrides: { logging: { level: "warn" } }, env: { LOG_LEVEL: "TRACE" } }).logging
        .level,
    ).toBe("trace");
    expect(loadConfig({ overrides: { logging: { level: "warn" } }, env: {} }).logging.level).toBe(
      "warn",
    );
    expect(() => loadConfig({ env: { LOG_LEVEL: "loud" } })).toThrowError(/LOG_LEVEL.*"loud"/);
  });

  it("rejects a non-numeric warmup deadline naming the variable", () => {
    expect(() => loadConfig({ env: { SERVICE_WARMUP_DEADLINE_SECONDS: "soon" } })).toThrowError(
      /SERVICE_WARMUP_DEADLINE_SECONDS/,
    );
  });
});

function secretFile(content: string, mode: number): string {
  const dir = mkdtempSync(join(tmpdir(), "sec-"));
  const p = join(dir, "s");
  writeFileSync(p, `${content}\n`);
  chmodSync(p, mode);
  return p;
}

describe("cluster secret and API tokens", () => {
  const secret = "0123456789abcdef0123456789abcdef";

  it("a node with peers and no secret refuses to load, naming the key and the remedy", () => {
    expect(() =>
      loadConfig({ overrides: { cluster: { peers: ["node-2:6222"] } }, env: {} }),
    ).toThrowError(/cluster\.secret: .*needs the cluster secret.*openssl rand/);
  });

  it("a lone node without a secret gets a random one of its own", () => {
    const a = loadConfig({ env: {} });
    const b = loadConfig({ env: {} });
    expect(a.cluster.secret).toMatch(/^[0-9a-f]{64}$/);
    expect(a.cluster.secret).not.toBe(b.cluster.secret);
  });

  it("reads the secret from a 0600 file and refuses a file others can read", () => {
    const ok = secretFile(secret, 0o600);
    const c = loadConfig({
      overrides: { cluster: { peers: ["node-2:6222"], secret_file: ok } },
      env: {},
    });
    expect(c.cluster.secret).toBe(secret);
    const open = secretFile(secret, 0o644);
    expect(() =>
      loadConfig({ overrides: { cluster: { secret_file: open } }, env: {} }),
    ).toThrowError(/cluster\.secret_file: .* has mode 644; .*chmod 600/);
    expect(() =>
      loadConfig({ overrides: { cluster: { secret_file: secretFile("short", 0o600) } }, env: {} }),
    ).toThrowError(/at least 16 characters/);
    expect(() =>
      loadConfig({ overrides: { cluster: { secret, secret_file: ok } }, env: {} }),
    ).toThrowError(/either cluster\.secret or cluster\.secret_file/);
  });

  it("takes SERVICE_CLUSTER_SECRET from the environment", () => {
    const c = loadConfig({
      overrides: { cluster: { peers: ["node-2:6222"] } },
      env: { SERVICE_CLUSTER_SECRET: secret },
    });
    expect(c.cluster.secret).toBe(secret);
  });

  it("an API beyond loopback without tokens refuses to load unless allow_anonymous", () => {
    expect(() => loadConfig({ overrides: { node: { host: "10.0.0.5" } }, env: {} })).toThrowError(
      /auth\.tokens: the API listens on 10\.0\.0\.5 .*allow_anonymous/,
    );
    expect(() =>
      loadConfig({ overrides: { node: { host: "127.0.0.1", bind: "0.0.0.0" } }, env: {} }),
    ).toThrowError(/auth\.tokens/);
    const anon = loadConfig({
      overrides: {
        node: { host: "10.0.0.5" },
        auth: { allow_anonymous: true },
        tls: { allow_plaintext: true },
      },
      env: {},
    });
    expect(anon.node.bind).toBe("10.0.0.5");
    const loop = loadConfig({ env: {} });
    expect(loop.node.bind).toBe("127.0.0.1");
  });

  it("tokens come inline or from 0600 files, with at least one scope each", () => {
    const tf = secretFile("file-token-0123456789", 0o600);
    const c = loadConfig({
      overrides: {
        node: { host: "10.0.0.5" },
        tls: { allow_plaintext: true },
        auth: {
          tokens: [
            { name: "ops", token: "inline-token-0123456789", scopes: ["admin"] },
            { name: "apps", token_file: tf, scopes: ["inference"] },
          ],
        },
      },
      env: {},
    });
    expect(c.auth.tokens).toEqual([
      { name: "ops", token: "inline-token-0123456789", scopes: ["admin"] },
      { name: "apps", token: "file-token-0123456789", scopes: ["inference"] },
    ]);
    expect(() =>
      loadConfig({
        overrides: {
          auth: { tokens: [{ name: "x", token: "inline-token-0123456789", scopes: [] }] },
        },
        env: {},
      }),
    ).toThrowError(/auth\.tokens\.0\.scopes/);
    expect(() =>
      loadConfig({
        overrides: { auth: { tokens: [{ name: "x", scopes: ["read"] }] } },
        env: {},
      }),
    ).toThrowError(/exactly one of token and token_file/);
    expect(() =>
      loadConfig({
        overrides: {
          auth: {
            tokens: [
              { name: "x", token_file: secretFile("t0123456789abcdefgh", 0o640), scopes: ["read"] },
            ],
          },
        },
        env: {},
      }),
    ).toThrowError(/auth\.tokens\.0\.token_file: .*mode 640/);
  });

  it("isLoopback knows loopback addresses only", () => {
    for (const a of ["127.0.0.1", "127.1.2.3", "::1", "localhost"])
      expect(isLoopback(a)).toBe(true);
    for (const a of ["0.0.0.0", "10.0.0.1", "node-1", "::"]) expect(isLoopback(a)).toBe(false);
  });

  it("derived credentials differ by purpose and by secret, and never contain the secret", () => {
    const a = clusterCredentials(secret);
    const b = clusterCredentials(`${secret}x`);
    const all = [a.busClient.password, a.busRoute.password, a.nodeToken];
    expect(new Set(all).size).toBe(3);
    expect(all.some((k) => k.includes(secret))).toBe(false);
    expect(b.busRoute.password).not.toBe(a.busRoute.password);
    expect(b.nodeToken).not.toBe(a.nodeToken);
    expect(clusterCredentials(secret).nodeToken).toBe(a.nodeToken);
  });

  it("the shipped example and compose configs load once their secret files exist", () => {
    const dir = makeSecrets("node-1=node-1", "node-2=node-2", "node-3=node-3");
    const root = join(import.meta.dirname, "../../../deploy");
    for (const f of [
      "config.example.yaml",
      "compose/node-1.yaml",
      "compose/node-2.yaml",
      "compose/node-3.yaml",
    ]) {
      const text = readFileSync(join(root, f), "utf8").replaceAll(
        "/etc/inference-cluster/secrets",
        dir,
      );
      const c = loadConfig({ file: file(text), env: {} });
      expect(c.cluster.peers).toHaveLength(2);
      expect(c.auth.tokens.map((t) => t.scopes.length)).toEqual([3, 1, 1]);
      expect(c.node.bind).toBe("0.0.0.0");
      expect(c.tls?.cert).toContain("BEGIN CERTIFICATE");
    }
  });
});

/** `scripts/make-secrets.mjs` into a new directory, with a certificate for each NAME=HOST. */
function makeSecrets(...nodes: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), "secrets-"));
  execFileSync(
    process.execPath,
    [
      join(import.meta.dirname, "../../../scripts/make-secrets.mjs"),
      dir,
      ...nodes.flatMap((n) => ["--node", n]),
    ],
    { stdio: "ignore" },
  );
  return dir;
}

describe("tls", () => {
  const dir = makeSecrets("n1=10.0.0.5", "n2=n2.lan");
  const other = makeSecrets("n1=10.0.0.5");
  const files = (d: string, n: string) => ({
    ca_file: join(d, "ca.crt"),
    cert_file: join(d, `${n}.crt`),
    key_file: join(d, `${n}.key`),
  });
  const load = (host: string, tls: Record<string, unknown>) =>
    loadConfig({ overrides: { node: { host }, auth: { allow_anonymous: true }, tls }, env: {} });

  it("is required beyond loopback unless allow_plaintext; optional on loopback", () => {
    expect(() => load("10.0.0.5", {})).toThrowError(
      /tls: the node listens on 10\.0\.0\.5 \(beyond loopback\) without certificates.*make-secrets/,
    );
    expect(load("10.0.0.5", { allow_plaintext: true }).tls).toBeNull();
    expect(loadConfig({ env: {} }).tls).toBeNull();
  });

  it("loads the CA, the certificate and its key, checked against each other and node.host", () => {
    const c = load("10.0.0.5", files(dir, "n1"));
    expect(c.tls).toMatchObject({ ca_file: join(dir, "ca.crt"), cert_file: join(dir, "n1.crt") });
    expect(c.tls!.key).toContain("PRIVATE KEY");
    expect(load("n2.lan", files(dir, "n2")).tls).not.toBeNull();
    expect(load("127.0.0.1", files(dir, "n2")).tls).not.toBeNull();
  });

  it("refuses a partial set, another CA's certificate, another host's, the wrong key, a readable key", () => {
    expect(() => load("10.0.0.5", { ca_file: join(dir, "ca.crt") })).toThrowError(
      /tls: set all of tls\.ca_file, tls\.cert_file and tls\.key_file, or none/,
    );
    expect(() =>
      load("10.0.0.5", { ...files(other, "n1"), ca_file: join(dir, "ca.crt") }),
    ).toThrowError(/tls\.cert_file: .* is not signed by the cluster CA/);
    expect(() => load("10.0.0.6", files(dir, "n1"))).toThrowError(
      /tls\.cert_file: .* is not valid for node\.host 10\.0\.0\.6 \(IP Address:10\.0\.0\.5/,
    );
    expect(() =>
      load("10.0.0.5", { ...files(dir, "n1"), key_file: join(dir, "n2.key") }),
    ).toThrowError(/tls\.key_file: .* is not the key of the certificate/);
    expect(() =>
      load("10.0.0.5", { ...files(dir, "n1"), ca_file: join(dir, "n1.crt") }),
    ).toThrowError(/tls\.ca_file: .* holds a certificate that is not a CA.s/);
    chmodSync(join(dir, "n2.key"), 0o644);
    expect(() => load("n2.lan", files(dir, "n2"))).toThrowError(/tls\.key_file: .* chmod 600/);
    chmodSync(join(dir, "n2.key"), 0o600);
  });

  it("a rotation secret: the other one of a rotation, only with TLS, never the secret itself", () => {
    const secret = "0123456789abcdef0123456789abcdef";
    const rotating = (tls: Record<string, unknown>, rotation_secret: string) =>
      loadConfig({
        overrides: {
          node: { host: "10.0.0.5" },
          auth: { allow_anonymous: true },
          cluster: { secret, rotation_secret },
          tls,
        },
        env: {},
      });
    const other = "the-other-secret-0123456789";
    expect(rotating(files(dir, "n1"), other).cluster).toMatchObject({
      rotation_secret: other,
      secret_generated: false,
    });
    // A lone node without a configured secret makes one at each load (a reload keeps its own).
    expect(loadConfig({ env: {} }).cluster.secret_generated).toBe(true);
    expect(load("10.0.0.5", files(dir, "n1")).cluster.rotation_secret).toBeUndefined();
    expect(() => rotating({ allow_plaintext: true }, other)).toThrowError(
      /cluster\.rotation_secret: rotating the cluster secret without a restart needs TLS/,
    );
    expect(() => rotating(files(dir, "n1"), secret)).toThrowError(
      /cluster\.rotation_secret: it is the cluster secret itself/,
    );
  });

  it("accepts a CA bundle (old and new CA while the CA is rotated) when either signed the certificate", () => {
    const bundle = join(other, "bundle.crt");
    writeFileSync(
      bundle,
      readFileSync(join(dir, "ca.crt"), "utf8") + readFileSync(join(other, "ca.crt"), "utf8"),
    );
    expect(load("10.0.0.5", { ...files(other, "n1"), ca_file: bundle }).tls).not.toBeNull();
    expect(load("10.0.0.5", { ...files(dir, "n1"), ca_file: bundle }).tls).not.toBeNull();
  });
});
