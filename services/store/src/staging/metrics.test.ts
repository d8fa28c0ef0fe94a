// A node's staging metrics and the store host's pull metrics, read from a registry as a scrape
// reads them.
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import type { Pull } from "@ic/protocol";
import { pullMetrics } from "../store-host/metrics.ts";
import { stagingMetrics } from "./metrics.ts";
import type { StagedEntry } from "./staging-types.ts";

describe("stagingMetrics", () => {
  it("gives the staged copies' bytes and count, and the bytes received by source and served", async () => {
    const registry = new Registry();
    const entries = [{ bytes: 1000 }, { bytes: 24 }] as StagedEntry[];
    const counters = { from_store_bytes: 300, from_peers_bytes: 700 };
    const peerServe = { bytes_served: 900, range_requests: 3 };
    let listings = 0;
    const list = async () => (listings++, entries);
    stagingMetrics(registry, { staging: () => ({ list, counters }), peerServe });
    const text = await registry.metrics();
    expect(text).toContain("ic_node_staging_bytes 1024");
    expect(text).toContain("ic_node_staged_models 2");
    // One listing of the staging root serves both gauges of a scrape.
    expect(listings).toBe(1);
    expect(text).toContain('ic_staging_received_bytes_total{source="store"} 300');
    expect(text).toContain('ic_staging_received_bytes_total{source="peers"} 700');
    expect(text).toContain("ic_staging_served_to_peers_bytes_total 900");
    peerServe.bytes_served += 100;
    expect(await registry.metrics()).toContain("ic_staging_served_to_peers_bytes_total 1000");
  });
});

describe("pullMetrics", () => {
  it("gives each pull's bytes by state, and its size once known", async () => {
    const registry = new Registry();
    const pulls = [
      { model_id: "acme/x", state: "running", bytes_done: 42, bytes_total: 100 },
      { model_id: "acme/y", state: "queued", bytes_done: 0, bytes_total: null },
    ] as unknown as Pull[];
    pullMetrics(registry, { list: () => pulls });
    const text = await registry.metrics();
    expect(text).toContain('ic_store_pull_bytes{model="acme/x",state="running"} 42');
    expect(text).toContain('ic_store_pull_total_bytes{model="acme/x"} 100');
    expect(text).not.toContain('ic_store_pull_total_bytes{model="acme/y"}');
  });
});
