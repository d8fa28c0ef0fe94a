// Counts stop requests per source, not per delivery: a stop signal sent to the node's process group
// reaches the node itself and, forwarded, through its supervisor, a few ms apart -- one request.
// Only a request that comes at least `windowMs` after the first is a deliberate second stop.

/** How far apart two stop signals must be to count as two requests (a group delivery is ~2-11 ms). */
export const DUPLICATE_STOP_WINDOW_MS = 1000;

/** What a stop request is: the first, a repeat of the first (ignored), or a deliberate second. */
export type StopRequestKind = "first" | "duplicate" | "second";

/** The stop requests a process has had. Pure, given the times passed in. */
export class StopRequests {
  private firstAt: number | undefined;

  constructor(private readonly windowMs: number = DUPLICATE_STOP_WINDOW_MS) {}

  /** Classifies a stop request arriving at `nowMs`. */
  take(nowMs: number): StopRequestKind {
    if (this.firstAt === undefined) {
      this.firstAt = nowMs;
      return "first";
    }
    return nowMs - this.firstAt < this.windowMs ? "duplicate" : "second";
  }
}
