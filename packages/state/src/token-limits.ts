// Limits per API token (config auth.tokens[].limits), counted by the master: every chat request of
// the cluster opens a task there (CreateTask), so one table sees every gateway's requests in order
// and the counts are exact while the master stays. Pure: time comes from the caller.
import { ServiceError } from "@ic/protocol";
import type { TokenLimits } from "@ic/protocol";

/** The sliding window requests_per_minute and tokens_per_minute count over. */
export const LIMIT_WINDOW_MS = 60_000;
/** The window's resolution: counts are kept per second, so an entry leaves it within a second. */
const BUCKET_MS = 1000;
/** Token names the master keeps windows for at most (configured tokens are few; a bound all the same). */
export const MAX_LIMITED_TOKENS = 10_000;

interface Bucket {
  /** Start of the second (ms). */
  readonly at: number;
  requests: number;
  tokens: number;
}

/** What a token has used in the window, and how many of its requests are open. */
export interface TokenUse {
  readonly requests: number;
  readonly tokens: number;
  readonly open: number;
}

/**
 * Per token name, the last minute's admitted requests and used tokens in one-second buckets
 * (at most 61 per token), oldest first. A window with nothing left in it is dropped.
 */
export class TokenWindows {
  private readonly windows = new Map<string, Bucket[]>();

  constructor(private readonly maxTokens = MAX_LIMITED_TOKENS) {}

  /** The token's window at `now` (expired buckets dropped). */
  private window(name: string, now: number): Bucket[] {
    const w = this.windows.get(name);
    if (!w) return [];
    let drop = 0;
    while (drop < w.length && w[drop]!.at + BUCKET_MS <= now - LIMIT_WINDOW_MS) drop++;
    if (drop > 0) w.splice(0, drop);
    if (w.length === 0) this.windows.delete(name);
    return w;
  }

  private add(name: string, now: number, requests: number, tokens: number): void {
    let w = this.window(name, now);
    if (w.length === 0) {
      if (!this.windows.has(name) && this.windows.size >= this.maxTokens) {
        // The least recently started window goes (Map order: insertion).
        const oldest = this.windows.keys().next().value as string;
        this.windows.delete(oldest);
      }
      w = [];
      this.windows.set(name, w);
    }
    const at = now - (now % BUCKET_MS);
    const last = w[w.length - 1];
    if (last && last.at === at) {
      last.requests += requests;
      last.tokens += tokens;
    } else {
      w.push({ at, requests, tokens });
    }
  }

  /** An admitted request. */
  request(name: string, now: number): void {
    this.add(name, now, 1, 0);
  }

  /** Tokens a request used (counted when it ends: the engine says how many). */
  used(name: string, tokens: number, now: number): void {
    if (tokens > 0) this.add(name, now, 0, tokens);
  }

  /** Requests and tokens in the window at `now`. */
  totals(name: string, now: number): { requests: number; tokens: number } {
    let requests = 0;
    let tokens = 0;
    for (const b of this.window(name, now)) {
      requests += b.requests;
      tokens += b.tokens;
    }
    return { requests, tokens };
  }

  /**
   * Seconds until the window holds less than `limit` of `what` (at least 1): the buckets that must
   * leave it, oldest first, and the time the last of them does.
   */
  secondsUntilBelow(name: string, what: "requests" | "tokens", limit: number, now: number): number {
    const w = this.window(name, now);
    let total = 0;
    for (const b of w) total += b[what];
    for (const b of w) {
      if (total < limit) break;
      total -= b[what];
      if (total < limit)
        return Math.max(1, Math.ceil((b.at + BUCKET_MS + LIMIT_WINDOW_MS - now) / 1000));
    }
    return 1;
  }

  clear(): void {
    this.windows.clear();
  }

  get size(): number {
    return this.windows.size;
  }
}

/** A limit reached: which one, its value, and the use that reached it (a refusal's details). */
interface ReachedLimit {
  limit: keyof TokenLimits;
  value: number;
  used: number;
}

/**
 * Whether one more request of token `name` may start: the first limit reached refuses it with
 * rate_limited, the limit and the token named, and the seconds until it would pass (Retry-After).
 * Concurrency is checked first (it frees soonest), then requests, then tokens per minute.
 */
export function checkTokenLimits(
  name: string,
  limits: TokenLimits,
  use: TokenUse,
  retryAfterS: (what: "requests" | "tokens", limit: number) => number,
): ServiceError | undefined {
  const refuse = ({ limit, value, used }: ReachedLimit, after: number, what: string) =>
    new ServiceError(
      "rate_limited",
      `token "${name}" reached its limit of ${value} ${what} (${used} now); retry after ${after} s`,
      { details: { token: name, limit, value, used }, retryAfterS: after },
    );
  const c = limits.concurrent_requests;
  if (c !== undefined && use.open >= c)
    return refuse(
      { limit: "concurrent_requests", value: c, used: use.open },
      1,
      "concurrent requests",
    );
  const r = limits.requests_per_minute;
  if (r !== undefined && use.requests >= r)
    return refuse(
      { limit: "requests_per_minute", value: r, used: use.requests },
      retryAfterS("requests", r),
      "requests per minute",
    );
  const t = limits.tokens_per_minute;
  if (t !== undefined && use.tokens >= t)
    return refuse(
      { limit: "tokens_per_minute", value: t, used: use.tokens },
      retryAfterS("tokens", t),
      "tokens per minute",
    );
  return undefined;
}
