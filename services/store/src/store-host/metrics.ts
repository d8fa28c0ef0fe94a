// The store host's metrics, declared in the node's registry: its pulls from the model hub.
import { Gauge } from "prom-client";
import type { Registry } from "prom-client";
import type { Pull } from "@ic/protocol";

export function pullMetrics(registry: Registry, pulls: { list(): readonly Pull[] }): void {
  const registers = [registry];
  new Gauge({
    name: "ic_store_pull_bytes",
    help: "The store host's pulls from the model hub: bytes fetched so far, by model and state.",
    labelNames: ["model", "state"],
    registers,
    collect() {
      this.reset();
      for (const p of pulls.list()) this.set({ model: p.model_id, state: p.state }, p.bytes_done);
    },
  });
  new Gauge({
    name: "ic_store_pull_total_bytes",
    help: "The size of each pull from the model hub, once known.",
    labelNames: ["model"],
    registers,
    collect() {
      this.reset();
      for (const p of pulls.list())
        if (p.bytes_total !== null) this.set({ model: p.model_id }, p.bytes_total);
    },
  });
}
