// The gateway's own metrics (Component.metrics): how well its prompt-cache map predicts what the
// engines reuse, per instance. Each reads the map when scraped: the predicted and the reused prompt
// tokens side by side (their ratio is the map's accuracy over time; the error total shows what the
// sums hide), and how many prompts the map now assumes each engine keeps. And the KV caches that
// moved with migrating streams (chat/handover.ts): how many, their bytes, the tokens restored against
// those the target still prefilled, the time the moves took and the prefill time they spared.
import { Counter, Gauge } from "prom-client";
import type { Registry } from "prom-client";
import type { CacheAccuracy, PromptCacheMap } from "./prompt-cache.ts";
import type { KvMoveStats } from "./chat/handover.ts";

const COUNTS: readonly [name: string, help: string, read: (a: CacheAccuracy) => number][] = [
  [
    "ic_prompt_cache_requests_total",
    "Requests routed on the prompt-cache map whose engine reported its prompt reuse (timings.cache_n), per instance.",
    (a) => a.requests,
  ],
  [
    "ic_prompt_cache_predicted_tokens_total",
    "Prompt tokens the gateway's prompt-cache map predicted the instance's engine would reuse from its cache.",
    (a) => a.predictedTokens,
  ],
  [
    "ic_prompt_cache_cached_tokens_total",
    "Prompt tokens the instance's engine reported it reused from its cache (timings.cache_n), for the same requests.",
    (a) => a.cachedTokens,
  ],
  [
    "ic_prompt_cache_prompt_tokens_total",
    "Prompt tokens of the same requests in all (cached and computed).",
    (a) => a.promptTokens,
  ],
  [
    "ic_prompt_cache_error_tokens_total",
    "Sum over requests of |predicted - reused| prompt tokens: 0 only when every prediction was exact.",
    (a) => a.errorTokens,
  ],
];

/**
 * Labelled `ic_instance`, as the runners' metrics: Prometheus sets `instance` to the scrape target and
 * renames a scraped `instance` label to `exported_instance`.
 */
export function promptCacheMetrics(registry: Registry, cache: PromptCacheMap): void {
  const registers = [registry];
  for (const [name, help, read] of COUNTS)
    new Counter({
      name,
      help,
      labelNames: ["ic_instance"],
      registers,
      collect() {
        this.reset();
        for (const [instance, a] of cache.accuracy()) this.inc({ ic_instance: instance }, read(a));
      },
    });
  new Gauge({
    name: "ic_prompt_cache_entries",
    help: "Prompts the gateway's prompt-cache map assumes the instance's engine keeps (learned from its reuse counts).",
    labelNames: ["ic_instance"],
    registers,
    collect() {
      this.reset();
      for (const [instance, a] of cache.accuracy()) this.set({ ic_instance: instance }, a.capacity);
    },
  });
}

const KV_SUMS: readonly [name: string, help: string, read: (s: KvMoveStats) => number][] = [
  [
    "ic_kv_move_bytes_total",
    "Bytes of KV caches (slot files) this gateway moved between nodes with migrating streams.",
    (s) => s.bytes,
  ],
  [
    "ic_kv_move_restored_tokens_total",
    "Tokens of the moved caches the target engines restored (their n_restored).",
    (s) => s.restoredTokens,
  ],
  [
    "ic_kv_move_prefilled_tokens_total",
    "Prompt tokens the target engines still computed for the continuations after a restore (timings.prompt_n).",
    (s) => s.prefilledTokens,
  ],
  [
    "ic_kv_move_seconds_total",
    "Time the cache moves took (save, fetch, restore), summed.",
    (s) => s.seconds,
  ],
  [
    "ic_kv_move_saved_seconds_total",
    "Prefill time the restored tokens spared, at each target's recent prefill rate, less the moves' own time (moves to an instance with no measured rate count 0).",
    (s) => s.savedSeconds,
  ],
];

export function kvMoveMetrics(registry: Registry, stats: KvMoveStats): void {
  const registers = [registry];
  new Counter({
    name: "ic_kv_moves_total",
    help: "Migrating streams whose KV cache this gateway tried to move, per model, by outcome (moved: restored on the target; failed: the continuation prefilled it).",
    labelNames: ["model", "outcome"],
    registers,
    collect() {
      this.reset();
      for (const [model, t] of stats.totals) {
        this.inc({ model, outcome: "moved" }, t.moves);
        this.inc({ model, outcome: "failed" }, t.failed);
      }
    },
  });
  for (const [name, help, read] of KV_SUMS)
    new Counter({
      name,
      help,
      registers,
      collect() {
        this.reset();
        this.inc(read(stats));
      },
    });
}
