import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, loadConfig, stagingFor } from "./index.ts";

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

  it("rejects a non-numeric warmup deadline naming the variable", () => {
    expect(() => loadConfig({ env: { SERVICE_WARMUP_DEADLINE_SECONDS: "soon" } })).toThrowError(
      /SERVICE_WARMUP_DEADLINE_SECONDS/,
    );
  });
});
