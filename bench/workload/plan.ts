// The workload benchmarks' settings: each shape's parameters for the wide test model on a CPU
// engine (one thread per replica), its open-loop arrival rate, and the SLO goodput is measured
// at. BENCH_WORKLOAD_SCALE multiplies every count (sessions, prompts) for a quick smoke run.
import type { Arrival, Sample, Target } from "./load.ts";
import { drive } from "./load.ts";
import { sessions } from "./shapes.ts";
import type { ShapeName, ShapeParams } from "./shapes.ts";
import { summarizeRun } from "./summary.ts";
import type { Slo, Summary } from "./summary.ts";

const SCALE = Number(process.env.BENCH_WORKLOAD_SCALE ?? 1);
const n = (x: number) => Math.max(1, Math.round(x * SCALE));

export function shapeParams(seed: number): ShapeParams {
  return {
    seed,
    charsPerToken: 1,
    sharegpt: { requests: n(30), scale: 0.25 },
    sharedPrefix: {
      groups: 6,
      promptsPerGroup: n(4),
      systemTokens: 1536,
      questionTokens: 64,
      outputTokens: 16,
    },
    multiTurn: {
      conversations: 8,
      turns: n(6),
      firstTokens: 1200,
      followTokens: 48,
      outputTokens: 24,
    },
    agent: { sessions: 8, turns: n(5), prefixTokens: 2000, turnTokens: 40, outputTokens: 16 },
  };
}

/** Open-loop session arrivals per second, per shape. */
export const RATES: Record<ShapeName, number> = {
  sharegpt: 1.5,
  // Under what two one-thread replicas serve when most prompts miss (a cold 1,600-token prompt
  // takes ~0.9 s): at 2/s both modes drown in their queues and no routing can be told apart.
  "shared-prefix": 0.75,
  // Sessions of several turns: they start within a few seconds and then run side by side (their
  // working set is every session's history at once).
  "multi-turn": 4,
  agent: 4,
};

/**
 * Goodput's SLO, for a CPU engine: an interactive TTFT (a prompt of ~1,600 tokens computed cold
 * misses it, one read from the cache meets it) and time per output token.
 */
export const SLO: Slo = { ttftMs: 500, tpotMs: 100 };

export interface ShapeRun {
  readonly shape: ShapeName;
  readonly arrival: Arrival;
  readonly summary: Summary;
  readonly samples: readonly Sample[];
  /** Requests per instance (x-instance-id). */
  readonly split: readonly number[];
}

/** One shape, one seed, on `target`. */
export async function runShape(
  target: Target,
  shape: ShapeName,
  seed: number,
  arrival: Arrival,
): Promise<ShapeRun> {
  const { samples, wallS } = await drive(target, sessions(shape, shapeParams(seed)), arrival);
  const byInstance = new Map<string, number>();
  for (const s of samples) byInstance.set(s.instance, (byInstance.get(s.instance) ?? 0) + 1);
  return {
    shape,
    arrival,
    samples,
    summary: summarizeRun(samples, wallS, SLO),
    split: [...byInstance.values()].sort((a, b) => b - a),
  };
}

export function describeParams(): string {
  const p = shapeParams(0);
  const s = p.sharedPrefix;
  const m = p.multiTurn;
  const a = p.agent;
  return [
    `- **sharegpt**: ${p.sharegpt.requests} single-turn requests, log-normal lengths with the ShareGPT means of the vLLM paper scaled by ${p.sharegpt.scale} (mean input ~40 characters, output ~85 tokens; bench/workload/shapes.ts gives the source and the σ), open loop at ${RATES.sharegpt}/s.`,
    `- **shared-prefix** (sglang's generated-shared-prefix): ${s.groups} groups × ${s.promptsPerGroup} prompts, a ${s.systemTokens}-character system prompt per group, ${s.questionTokens}-character questions, ${s.outputTokens}-token outputs, groups interleaved, open loop at ${RATES["shared-prefix"]}/s.`,
    `- **multi-turn**: ${m.conversations} conversations × ${m.turns} turns, a ${m.firstTokens}-character first message, ${m.followTokens}-character follow-ups, ${m.outputTokens}-token answers kept in the history, conversations starting at ${RATES["multi-turn"]}/s (open loop), turns in order.`,
    `- **agent**: ${a.sessions} sessions × ${a.turns} turns behind one ${a.prefixTokens}-character prefix (tools and system prompt), ${a.turnTokens}-character turns, ${a.outputTokens}-token answers, sessions starting at ${RATES.agent}/s.`,
    `- Prompt lengths are characters; the test model's vocabulary makes about 0.75 tokens of each (a 1,536-character system prompt is ~1,150 tokens).`,
    `- Goodput: requests per second with TTFT ≤ ${SLO.ttftMs} ms and time per output token ≤ ${SLO.tpotMs} ms. Cache hit rate: prompt tokens the engines reused over prompt tokens in all, from each answer's \`timings\` (the engine's own counts).`,
  ].join("\n");
}
