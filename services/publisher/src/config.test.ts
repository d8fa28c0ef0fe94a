import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BUILTIN_CATALOG, ConfigError, loadConfig } from "./config.ts";

describe("loadConfig", () => {
  it("defaults to the spec's limits, the tool's config dir and the built-in catalog", () => {
    const c = loadConfig({});
    expect(c).toEqual({
      port: 7861,
      configDir: join(homedir(), ".config", "weights-publisher"),
      hubUrl: undefined,
      catalogPath: BUILTIN_CATALOG,
      retentionMs: 600_000,
      maxJobs: 2,
      workDir: tmpdir(),
      logLevel: "info",
    });
    expect(Object.isFrozen(c)).toBe(true);
  });

  it("takes overrides from the environment, ignoring empty values", () => {
    const c = loadConfig({
      PUBLISHER_PORT: "0",
      PUBLISHER_CONFIG_DIR: "/tmp/pub",
      HF_ENDPOINT: "http://127.0.0.1:5000/",
      PUBLISHER_CATALOG: "/tmp/c.yaml",
      PUBLISHER_JOB_RETENTION_SECONDS: "5",
      PUBLISHER_WORK_DIR: "",
    });
    expect(c).toMatchObject({
      port: 0,
      configDir: "/tmp/pub",
      hubUrl: "http://127.0.0.1:5000",
      catalogPath: "/tmp/c.yaml",
      retentionMs: 5000,
      workDir: tmpdir(),
    });
  });

  describe("PUBLISHER_WORK_DIR", () => {
    const dir = mkdtempSync(join(tmpdir(), "publisher-config-"));
    const file = join(dir, "a-file");
    writeFileSync(file, "");
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    it("is checked at load: an existing directory, made absolute", () => {
      expect(loadConfig({ PUBLISHER_WORK_DIR: dir }).workDir).toBe(dir);
      expect(loadConfig({ PUBLISHER_WORK_DIR: `${dir}/./` }).workDir).toBe(dir);
    });

    it.each([
      ["a missing directory", join(dir, "missing"), "does not exist"],
      ["a file", file, "is not a directory"],
    ])("fails fast on %s with one line naming the variable", (_what, path, reason) => {
      let err: unknown;
      try {
        loadConfig({ PUBLISHER_WORK_DIR: path });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ConfigError);
      const message = (err as Error).message;
      expect(message).toBe(`invalid environment variable PUBLISHER_WORK_DIR: ${path} ${reason}`);
      expect(message).not.toContain("\n");
    });
  });

  it.each([
    [{ PUBLISHER_PORT: "70000" }, /PUBLISHER_PORT/],
    [{ HF_ENDPOINT: "not a url" }, /HF_ENDPOINT/],
    [{ HF_ENDPOINT: "ftp://hub" }, /HF_ENDPOINT/],
    [{ PUBLISHER_JOB_RETENTION_SECONDS: "-1" }, /PUBLISHER_JOB_RETENTION_SECONDS/],
  ])("names the variable in errors: %j", (env, message) => {
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(message);
  });
});
