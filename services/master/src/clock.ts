// The Clock seam: real time in production, a settable clock in unit tests.
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };
