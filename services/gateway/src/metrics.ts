// The gateway's own metrics (Component.metrics): how well its prompt-cache map predicts what the
// engines reuse, per instance. Each reads the map when scraped: the predicted and the reused prompt
// tokens side by side (their ratio is the map's accuracy over time; the error total shows what the
// sums hide), and how many prompts the map now assumes each engine keeps.
import { Counter, Gauge } from "prom-client";
import type { Registry } from "prom-client";
import type { CacheAccuracy, PromptCacheMap } from "./prompt-cache.ts";

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

export function promptCacheMetrics(registry: Registry, cache: PromptCacheMap): void {
  const registers = [registry];
  for (const [name, help, read] of COUNTS)
    new Counter({
      name,
      help,
      labelNames: ["instance"],
      registers,
      collect() {
        this.reset();
        for (const [instance, a] of cache.accuracy()) this.inc({ instance }, read(a));
      },
    });
  new Gauge({
    name: "ic_prompt_cache_entries",
    help: "Prompts the gateway's prompt-cache map assumes the instance's engine keeps (learned from its reuse counts).",
    labelNames: ["instance"],
    registers,
    collect() {
      this.reset();
      for (const [instance, a] of cache.accuracy()) this.set({ instance }, a.capacity);
    },
  });
}
