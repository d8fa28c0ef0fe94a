// The workload shapes every chat benchmark draws from, named as the standard tools name them. Each
// shape is a list of sessions; a session is turns sent in order (a turn's messages are the session's
// history so far plus its new user message, so a multi-turn history grows with the answers the engine
// gave). Prompt lengths are in tokens and become characters at `charsPerToken` (about 4 for English
// under a BPE vocabulary; the benches pass 1, so their stated lengths are characters, of which the
// wide test model's vocabulary makes about 0.75 tokens); output lengths are max_tokens. Deterministic per seed: the
// same seed gives the same prompts, another seed prompts that share nothing with them (a cold cache).
// Pure, so tests check the shapes' parameters.
import { mulberry32 } from "@ic/protocol";

export type ShapeName = "sharegpt" | "shared-prefix" | "multi-turn" | "agent";
export const SHAPES: readonly ShapeName[] = ["sharegpt", "shared-prefix", "multi-turn", "agent"];

export interface Turn {
  /** The new user message (the history before it is the session's earlier turns and answers). */
  readonly user: string;
  readonly maxTokens: number;
}

export interface Session {
  /** What every turn starts with: the system prompt (tools and instructions for an agent). */
  readonly system: string | undefined;
  readonly turns: readonly Turn[];
}

/**
 * ShareGPT-like lengths without the dataset: log-normal input and output lengths whose means are
 * those the vLLM paper reports for ShareGPT (Kwon et al., "Efficient Memory Management for Large
 * Language Model Serving with PagedAttention", SOSP 2023, §6.1: 161.31 input and 337.99 output
 * tokens on average). The paper gives the means and histograms, not a fitted law: the log-normal
 * shape and its σ (1.0 input, 0.9 output, by eye from the histograms' long right tails) are this
 * bench's, as are the caps. `scale` shrinks both means for a CPU engine; the report states it.
 */
export const SHAREGPT = {
  inputMean: 161.31,
  outputMean: 337.99,
  inputSigma: 1.0,
  outputSigma: 0.9,
  maxInput: 4096,
  maxOutput: 2048,
} as const;

/**
 * sglang's generated shared prefix (`bench_serving --dataset-name generated-shared-prefix`):
 * groups × prompts per group, every prompt of a group starting with the group's system prompt and
 * ending with a question of its own. sglang's defaults are 64 groups of 16 prompts, 2,048-token system
 * prompts, 128-token questions and 256-token outputs; the bench passes smaller ones for a CPU engine.
 */
export interface SharedPrefixParams {
  readonly groups: number;
  readonly promptsPerGroup: number;
  readonly systemTokens: number;
  readonly questionTokens: number;
  readonly outputTokens: number;
}

/** Conversations whose history grows: a first message (a document), then short follow-ups. */
export interface MultiTurnParams {
  readonly conversations: number;
  readonly turns: number;
  readonly firstTokens: number;
  readonly followTokens: number;
  readonly outputTokens: number;
}

/** An agent loop: one long fixed prefix (tools and system prompt) for every session, short turns. */
export interface AgentParams {
  readonly sessions: number;
  readonly turns: number;
  readonly prefixTokens: number;
  readonly turnTokens: number;
  readonly outputTokens: number;
}

export interface ShapeParams {
  readonly seed: number;
  readonly charsPerToken: number;
  readonly sharegpt: { readonly requests: number; readonly scale: number };
  readonly sharedPrefix: SharedPrefixParams;
  readonly multiTurn: MultiTurnParams;
  readonly agent: AgentParams;
}

/** A log-normal draw with mean `mean` and log-σ `sigma` (Box-Muller). */
export function logNormal(r: () => number, mean: number, sigma: number): number {
  const z = Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
  return Math.exp(Math.log(mean) - (sigma * sigma) / 2 + sigma * z);
}

const WORDS = (
  "river stone lantern orchard harbor meadow signal copper window garden ledger compass " +
  "thunder willow basket marble canyon feather pepper silver engine pocket anchor island"
).split(" ");

/** Text of `chars` characters drawn from `r`: different generators share no run of words. */
export function text(r: () => number, chars: number): string {
  let s = "";
  while (s.length < chars) s += `${WORDS[Math.floor(r() * WORDS.length)]} `;
  return s.slice(0, Math.max(0, chars));
}

/** The sessions of `shape` for one run (`p.seed` makes them its own). */
export function sessions(shape: ShapeName, p: ShapeParams): Session[] {
  const r = mulberry32(p.seed * 7919 + SHAPES.indexOf(shape));
  const chars = (tokens: number) => Math.max(1, Math.round(tokens * p.charsPerToken));
  switch (shape) {
    case "sharegpt": {
      const { requests, scale } = p.sharegpt;
      return Array.from({ length: requests }, () => {
        const input = Math.min(
          SHAREGPT.maxInput,
          logNormal(r, SHAREGPT.inputMean * scale, SHAREGPT.inputSigma),
        );
        const output = Math.min(
          SHAREGPT.maxOutput,
          logNormal(r, SHAREGPT.outputMean * scale, SHAREGPT.outputSigma),
        );
        return {
          system: undefined,
          turns: [
            {
              user: text(r, chars(Math.max(4, input))),
              maxTokens: Math.max(1, Math.round(output)),
            },
          ],
        };
      });
    }
    case "shared-prefix": {
      const s = p.sharedPrefix;
      const systems = Array.from(
        { length: s.groups },
        (_, g) => `Group ${g}. ${text(r, chars(s.systemTokens))}`,
      );
      // Prompts arrive interleaved across groups, as sglang sends them (shuffled).
      const out: Session[] = [];
      for (let i = 0; i < s.promptsPerGroup; i++)
        for (let g = 0; g < s.groups; g++)
          out.push({
            system: systems[g],
            turns: [{ user: text(r, chars(s.questionTokens)), maxTokens: s.outputTokens }],
          });
      return shuffle(out, r);
    }
    case "multi-turn": {
      const m = p.multiTurn;
      return Array.from({ length: m.conversations }, (_, c) => ({
        system: "You are a careful assistant.",
        turns: Array.from({ length: m.turns }, (_, t) => ({
          user:
            t === 0
              ? `Conversation ${c}. Read this: ${text(r, chars(m.firstTokens))}`
              : text(r, chars(m.followTokens)),
          maxTokens: m.outputTokens,
        })),
      }));
    }
    case "agent": {
      const a = p.agent;
      const prefix = `You are an agent with these tools: ${text(r, chars(a.prefixTokens))}`;
      return Array.from({ length: a.sessions }, (_, s) => ({
        system: prefix,
        turns: Array.from({ length: a.turns }, (_, t) => ({
          user: `Session ${s}, step ${t}: ${text(r, chars(a.turnTokens))}`,
          maxTokens: a.outputTokens,
        })),
      }));
    }
  }
}

function shuffle<T>(xs: T[], r: () => number): T[] {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
  return xs;
}
