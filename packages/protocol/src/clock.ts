// Time as an injected dependency: the system clock in production, a FakeClock that tests move. One
// interface for the whole project; a component that only reads the time takes `Pick<Clock, "now">`,
// so a test may hand it `{ now: () => t }`.

export interface TimerHandle {
  cancel(): void;
}

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolves after `ms`, or at once when `signal` aborts (callers check the signal). */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /** Calls `fn` once after `ms`; a pending timer does not keep the process alive. */
  setTimeout(fn: () => void, ms: number): TimerHandle;
}

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

export const systemClock: Clock = {
  now: () => Date.now(),
  sleep,
  setTimeout(fn, ms) {
    const t = setTimeout(fn, ms);
    t.unref();
    return { cancel: () => clearTimeout(t) };
  },
};

const flush = () => new Promise<void>((r) => setImmediate(r));

/**
 * A clock that moves only when a test says so. `advance` fires due timers and wakes sleepers in time
 * order, letting the woken code run (a macrotask turn) before the next one, so a loop that sleeps
 * again is seen at its new deadline; `set` jumps without firing anything.
 */
export class FakeClock implements Clock {
  private t: number;
  private seq = 0;
  private readonly timers = new Map<number, { at: number; fn: () => void }>();

  constructor(start = 1_700_000_000_000) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  set(t: number): void {
    this.t = t;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const id = ++this.seq;
    this.timers.set(id, { at: this.t + Math.max(0, ms), fn });
    return { cancel: () => this.timers.delete(id) };
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const wake = () => {
        timer.cancel();
        signal?.removeEventListener("abort", wake);
        resolve();
      };
      const timer = this.setTimeout(wake, ms);
      signal?.addEventListener("abort", wake, { once: true });
    });
  }

  async advance(ms: number): Promise<void> {
    const until = this.t + ms;
    for (;;) {
      await flush();
      // The earliest due timer; among equals the first set (a Map iterates in insertion order).
      let next: [number, { at: number; fn: () => void }] | undefined;
      for (const e of this.timers)
        if (e[1].at <= until && (!next || e[1].at < next[1].at)) next = e;
      if (!next) break;
      this.timers.delete(next[0]);
      this.t = next[1].at;
      next[1].fn();
    }
    this.t = until;
    await flush();
  }

  pendingTimers(): number {
    return this.timers.size;
  }
}
