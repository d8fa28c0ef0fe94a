// A node's staging metrics, declared in the node's registry: its staged copies (bytes, count) and
// the bytes they received (from the store host, from peers) and served to peers.
import { Counter, Gauge } from "prom-client";
import type { Registry } from "prom-client";
import type { PeerServeStats } from "./routes.ts";
import type { StagingClient } from "./staging-client.ts";

export interface StagingMetricsSource {
  /** This node's staging client (the node's stager creates it once staging is configured). */
  readonly staging: () => Pick<StagingClient, "list" | "counters">;
  /** What the peer routes served of this node's copies. */
  readonly peerServe: PeerServeStats;
}

export function stagingMetrics(registry: Registry, src: StagingMetricsSource): void {
  const registers = [registry];
  // One listing of the staging root per scrape: both gauges' collects start together and share it.
  let listing: Promise<{ bytes: number; models: number }> | undefined;
  const copies = () =>
    (listing ??= (async () => {
      const entries = await src.staging().list();
      return { bytes: entries.reduce((s, e) => s + e.bytes, 0), models: entries.length };
    })().finally(() => (listing = undefined)));
  new Gauge({
    name: "ic_node_staging_bytes",
    help: "Bytes of staged model copies under node_cache_path.",
    registers,
    async collect() {
      this.reset();
      this.set((await copies()).bytes);
    },
  });
  new Gauge({
    name: "ic_node_staged_models",
    help: "Staged model copies under node_cache_path.",
    registers,
    async collect() {
      this.reset();
      this.set((await copies()).models);
    },
  });
  new Counter({
    name: "ic_staging_received_bytes_total",
    help: "Bytes this node's staged copies received, by source: the store host, or peers (other nodes' copies).",
    labelNames: ["source"],
    registers,
    collect() {
      this.reset();
      const t = src.staging().counters;
      this.inc({ source: "store" }, t.from_store_bytes);
      this.inc({ source: "peers" }, t.from_peers_bytes);
    },
  });
  new Counter({
    name: "ic_staging_served_to_peers_bytes_total",
    help: "Bytes of this node's staged copies it served to other nodes staging the same model.",
    registers,
    collect() {
      this.reset();
      this.inc(src.peerServe.bytes_served);
    },
  });
}
