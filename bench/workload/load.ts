// The load generator: sends a shape's sessions (shapes.ts) to one or more base URLs, streaming, and
// measures each request as a client sees it: TTFT (first generated text), the gaps between text
// chunks (ITL), the tokens generated, and the engine's own prompt counts from its last chunk
// (`timings.cache_n` reused, `timings.prompt_n` computed). Open loop: sessions start at Poisson
// arrivals of `rate` per second, whatever the server's state (a session's turns follow one another);
// closed loop: `users` clients, each starting its next session when the last one ends. Requests
// take the base URLs in turn (a cluster's gateways).
import { performance } from "node:perf_hooks";
import { postUpstream } from "@ic/gateway";
import { hasContent, takeDataEvents } from "../lib/streaming.ts";
import { mulberry32 } from "@ic/protocol";
import type { Session } from "./shapes.ts";

export interface Target {
  readonly baseUrls: readonly string[];
  readonly model: string;
  readonly headers: Record<string, string>;
}

export type Arrival =
  | { readonly kind: "open"; readonly rate: number; readonly seed: number }
  | { readonly kind: "closed"; readonly users: number };

export interface Sample {
  readonly session: number;
  readonly turn: number;
  /** When the request was sent, from the run's start (ms). */
  readonly sentMs: number;
  readonly ttftMs: number;
  /** Gaps between generated text chunks after the first (ms). */
  readonly itlMs: readonly number[];
  readonly e2eMs: number;
  readonly tokens: number;
  readonly cachedTokens: number;
  readonly promptTokens: number;
  readonly instance: string;
  readonly error?: string;
}

type Message = { role: string; content: string };

interface Answer {
  ttftMs: number;
  itlMs: number[];
  e2eMs: number;
  tokens: number;
  content: string;
  cached: number;
  prompt: number;
  instance: string;
}

const TIMINGS = '"timings"';

/** One streamed request; its text, timing and the engine's counts. */
async function streamTurn(
  base: string,
  t: Target,
  messages: readonly Message[],
  maxTokens: number,
): Promise<Answer> {
  const body = JSON.stringify({
    model: t.model,
    messages,
    max_tokens: maxTokens,
    stream: true,
    stream_options: { include_usage: true },
    temperature: 0,
  });
  const t0 = performance.now();
  const res = await postUpstream(`${base}/v1/chat/completions`, body, { headers: t.headers });
  const a: Answer = {
    ttftMs: NaN,
    itlMs: [],
    e2eMs: 0,
    tokens: 0,
    content: "",
    cached: 0,
    prompt: 0,
    instance: String(res.headers["x-instance-id"] ?? "?"),
  };
  let last = 0;
  let buf = "";
  const onData = (ev: string) => {
    const content = hasContent(ev);
    const timed = ev.includes(TIMINGS);
    if (ev.includes('"error"')) throw new Error(`stream error: ${ev.slice(0, 300)}`);
    if (!content && !timed) return;
    const j = JSON.parse(ev.slice(6)) as {
      choices?: { delta?: { content?: string } }[];
      timings?: { cache_n?: number; prompt_n?: number; predicted_n?: number };
    };
    if (content) {
      const now = performance.now();
      if (Number.isNaN(a.ttftMs)) a.ttftMs = now - t0;
      else a.itlMs.push(now - last);
      last = now;
      a.tokens++;
      a.content += j.choices?.[0]?.delta?.content ?? "";
    }
    if (timed) {
      a.cached = j.timings?.cache_n ?? 0;
      a.prompt = (j.timings?.cache_n ?? 0) + (j.timings?.prompt_n ?? 0);
      if (j.timings?.predicted_n !== undefined) a.tokens = j.timings.predicted_n;
    }
  };
  res.setEncoding("utf8");
  for await (const chunk of res) buf = takeDataEvents(buf + (chunk as string), onData);
  if (res.statusCode !== 200) throw new Error(`${base}: ${res.statusCode} ${buf.slice(0, 300)}`);
  a.e2eMs = performance.now() - t0;
  return a;
}

/** A session's turns in order, each with the history so far (its answers included). */
async function runSession(
  t: Target,
  s: Session,
  { index, t0 }: { index: number; t0: number },
  pick: () => string,
): Promise<Sample[]> {
  const out: Sample[] = [];
  const messages: Message[] = s.system === undefined ? [] : [{ role: "system", content: s.system }];
  for (let k = 0; k < s.turns.length; k++) {
    const turn = s.turns[k]!;
    messages.push({ role: "user", content: turn.user });
    const sentMs = performance.now() - t0;
    try {
      const a = await streamTurn(pick(), t, messages, turn.maxTokens);
      out.push({
        session: index,
        turn: k,
        sentMs,
        ttftMs: a.ttftMs,
        itlMs: a.itlMs,
        e2eMs: a.e2eMs,
        tokens: a.tokens,
        cachedTokens: a.cached,
        promptTokens: a.prompt,
        instance: a.instance,
      });
      messages.push({ role: "assistant", content: a.content });
    } catch (e) {
      out.push({
        session: index,
        turn: k,
        sentMs,
        ttftMs: NaN,
        itlMs: [],
        e2eMs: NaN,
        tokens: 0,
        cachedTokens: 0,
        promptTokens: 0,
        instance: "?",
        error: (e as Error).message,
      });
      break;
    }
  }
  return out;
}

/** Runs every session under `arrival`; the samples and the wall time (s) from first send to last answer. */
export async function drive(
  t: Target,
  all: readonly Session[],
  arrival: Arrival,
): Promise<{ samples: Sample[]; wallS: number }> {
  let next = 0;
  const pick = () => t.baseUrls[next++ % t.baseUrls.length]!;
  const t0 = performance.now();
  const done: Promise<Sample[]>[] = [];
  if (arrival.kind === "open") {
    const r = mulberry32(arrival.seed);
    let at = 0;
    for (let i = 0; i < all.length; i++) {
      const wait = t0 + at - performance.now();
      if (wait > 0) await new Promise((res) => setTimeout(res, wait));
      done.push(runSession(t, all[i]!, { index: i, t0 }, pick));
      at += (-Math.log(1 - r()) / arrival.rate) * 1000;
    }
  } else {
    let taken = 0;
    const user = async () => {
      const mine: Sample[] = [];
      for (let i = taken++; i < all.length; i = taken++)
        mine.push(...(await runSession(t, all[i]!, { index: i, t0 }, pick)));
      return mine;
    };
    for (let u = 0; u < arrival.users; u++) done.push(user());
  }
  const samples = (await Promise.all(done)).flat();
  return { samples, wallS: (performance.now() - t0) / 1000 };
}
