// The one clock the services take (tests pass a fake): milliseconds since the epoch.
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };
