// What a workload run reports: goodput at a stated SLO (requests per second whose TTFT and time per
// output token both meet it, DistServe's definition), TTFT and inter-token latency at p50 and p99,
// the tokens generated per second, and the prompt cache's hit rate as the engines counted it (prompt
// tokens reused over prompt tokens in all). Pure, so a test checks the arithmetic.
import type { Sample } from "./load.ts";

export interface Slo {
  readonly ttftMs: number;
  /** Time per output token after the first: (e2e - TTFT) / (tokens - 1). */
  readonly tpotMs: number;
}

export interface Summary {
  readonly requests: number;
  readonly errors: number;
  readonly ttftP50: number;
  readonly ttftP99: number;
  readonly itlP50: number;
  readonly itlP99: number;
  /** Requests meeting the SLO per second of the run. */
  readonly goodput: number;
  /** Share of the requests that met the SLO. */
  readonly sloMet: number;
  readonly tokensPerS: number;
  /** Prompt tokens the engines reused from their caches over prompt tokens in all. */
  readonly cacheHitRate: number;
}

export function percentile(xs: readonly number[], q: number): number {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
}

export function tpotMs(s: Sample): number {
  return s.tokens > 1 ? (s.e2eMs - s.ttftMs) / (s.tokens - 1) : 0;
}

export function meetsSlo(s: Sample, slo: Slo): boolean {
  return s.error === undefined && s.ttftMs <= slo.ttftMs && tpotMs(s) <= slo.tpotMs;
}

export function summarizeRun(samples: readonly Sample[], wallS: number, slo: Slo): Summary {
  const ok = samples.filter((s) => s.error === undefined);
  const met = ok.filter((s) => meetsSlo(s, slo)).length;
  const gaps = ok.flatMap((s) => s.itlMs);
  const prompt = ok.reduce((n, s) => n + s.promptTokens, 0);
  return {
    requests: samples.length,
    errors: samples.length - ok.length,
    ttftP50: percentile(
      ok.map((s) => s.ttftMs),
      0.5,
    ),
    ttftP99: percentile(
      ok.map((s) => s.ttftMs),
      0.99,
    ),
    itlP50: percentile(gaps, 0.5),
    itlP99: percentile(gaps, 0.99),
    goodput: met / wallS,
    sloMet: samples.length === 0 ? 0 : met / samples.length,
    tokensPerS: ok.reduce((n, s) => n + s.tokens, 0) / wallS,
    cacheHitRate: prompt === 0 ? 0 : ok.reduce((n, s) => n + s.cachedTokens, 0) / prompt,
  };
}
