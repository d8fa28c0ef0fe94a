// The launcher's config file: YAML with a header, and an operator's staging edits (the dashboard's
// settings editor writes them) kept when the local cluster is launched again on the same data dir.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse } from "yaml";
import { describe, expect, it } from "vitest";
import { loadConfig } from "@ic/config";
import { prepareNode } from "./node-process.ts";

const spec = (dataDir: string, config?: Record<string, unknown>) => ({
  name: "node-1",
  clusterPort: 16222,
  peers: [],
  dataDir,
  ...(config ? { config } : {}),
});

describe("prepareNode", () => {
  it("writes a YAML file the loader accepts", () => {
    const dir = mkdtempSync(join(tmpdir(), "ic-launch-"));
    const n = prepareNode(spec(dir));
    const text = readFileSync(n.configPath, "utf8");
    expect(text).toMatch(/^# Written by the local-cluster launcher/);
    expect(loadConfig({ file: n.configPath, env: {} }).node.name).toBe("node-1");
  });

  it("keeps model_store.staging and node_overrides from the previous file; the caller's keys win", () => {
    const dir = mkdtempSync(join(tmpdir(), "ic-launch-"));
    const first = prepareNode(spec(dir));
    const doc = parse(readFileSync(first.configPath, "utf8")) as Record<string, unknown>;
    doc.model_store = { staging: { staging_keep_recent_gb: 3, headroom_gb: 1 } };
    doc.node_overrides = {
      "node-1": { model_store: { staging: { cleanup_on_deactivate: false } } },
    };
    doc.engine = { context_size: 99 };
    writeFileSync(first.configPath, JSON.stringify(doc));
    const again = prepareNode(spec(dir, { model_store: { staging: { headroom_gb: 2 } } }));
    const cfg = loadConfig({ file: again.configPath, env: {} });
    expect(cfg.model_store.staging).toEqual({
      cleanup_on_deactivate: true,
      staging_keep_recent_gb: 3,
      headroom_gb: 2,
    });
    expect(cfg.node_overrides["node-1"]?.model_store?.staging.cleanup_on_deactivate).toBe(false);
    // Everything else is generated again.
    expect(cfg.engine.context_size).toBe(4096);
  });
});
