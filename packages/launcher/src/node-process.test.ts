// The launcher's config file: YAML with a header, and an operator's settings (by hand, npm start
// --config, the dashboard's settings editor) kept when the local cluster is launched again on the
// same data dir; the launcher's own keys (names, ports, peers, secret, paths) are always its own.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse } from "yaml";
import { describe, expect, it } from "vitest";
import { loadConfig } from "@ic/config";
import { prepareNode, withoutLauncherKeys } from "./node-process.ts";

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

  it("keeps the operator's keys from the previous file; the caller's keys win", () => {
    const dir = mkdtempSync(join(tmpdir(), "ic-launch-"));
    const first = prepareNode(spec(dir));
    const doc = parse(readFileSync(first.configPath, "utf8")) as Record<string, unknown>;
    doc.model_store = { staging: { staging_keep_recent_gb: 3, headroom_gb: 1 } };
    doc.node_overrides = {
      "node-1": { model_store: { staging: { cleanup_on_deactivate: false } } },
    };
    doc.engine = { context_size: 99, extra_args: ["--flash-attn", "on"] };
    (doc.model_store as Record<string, unknown>).hub_url = "http://hub.lan:8081";
    // The launcher's keys are its own at every start.
    doc.node = { name: "renamed", api_port: 1 };
    doc.cluster = { secret: "x".repeat(64), peers: ["10.0.0.9:6222"] };
    writeFileSync(first.configPath, JSON.stringify(doc));
    const again = prepareNode(spec(dir, { model_store: { staging: { headroom_gb: 2 } } }));
    const cfg = loadConfig({ file: again.configPath, env: {} });
    expect(cfg.model_store.staging).toEqual({
      cleanup_on_deactivate: true,
      staging_keep_recent_gb: 3,
      headroom_gb: 2,
    });
    expect(cfg.node_overrides["node-1"]?.model_store?.staging.cleanup_on_deactivate).toBe(false);
    expect(cfg.engine.context_size).toBe(99);
    expect(cfg.engine.extra_args).toEqual(["--flash-attn", "on"]);
    expect(cfg.model_store.hub_url).toBe("http://hub.lan:8081");
    expect(cfg.node.name).toBe("node-1");
    expect(cfg.node.api_port).toBe(0);
    expect(cfg.cluster.peers).toEqual([]);
    expect(cfg.cluster.secret).not.toBe("x".repeat(64));
  });

  it("merges the operator's --config over what was kept, under the caller's keys", () => {
    const dir = mkdtempSync(join(tmpdir(), "ic-launch-"));
    prepareNode({ ...spec(dir), userConfig: { engine: { context_size: 1024, gpu_layers: 10 } } });
    const again = prepareNode({
      ...spec(dir, { engine: { gpu_layers: 0 } }),
      userConfig: { engine: { context_size: 8192 } },
    });
    const cfg = loadConfig({ file: again.configPath, env: {} });
    expect(cfg.engine.context_size).toBe(8192);
    expect(cfg.engine.gpu_layers).toBe(0);
    // A later launch without --config keeps what the last one set.
    const third = prepareNode(spec(dir));
    expect(loadConfig({ file: third.configPath, env: {} }).engine.context_size).toBe(8192);
  });

  it("names the launcher's keys an operator's file set", () => {
    const { kept, dropped } = withoutLauncherKeys({
      node: { name: "x", api_port: 9, drain_timeout_ms: 5 },
      cluster: { peers: [] },
      store_path: "/s",
      engine: { context_size: 4 },
    });
    expect(dropped).toEqual(["node.name", "node.api_port", "cluster.peers", "store_path"]);
    expect(kept).toEqual({
      node: { drain_timeout_ms: 5 },
      cluster: {},
      engine: { context_size: 4 },
    });
  });
});
