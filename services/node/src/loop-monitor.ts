// Event-loop delay of this node process, sampled per heartbeat: how late timers and I/O callbacks
// ran. Heartbeats carry it, so an operator (and the chaos tests) can see whether request work ever
// delayed the control plane; a delay near the liveness timeout would make peers look lost.
import { monitorEventLoopDelay } from "node:perf_hooks";
import type { IntervalHistogram } from "node:perf_hooks";

export interface LoopDelay {
  /** 99th percentile of the delay since the previous sample (ms). */
  readonly p99_ms: number;
  /** Largest delay since the previous sample (ms). */
  readonly max_ms: number;
  /** Largest delay since the process started (ms). */
  readonly max_ever_ms: number;
}

export class LoopMonitor {
  private readonly h: IntervalHistogram = monitorEventLoopDelay({ resolution: 10 });
  private maxEver = 0;

  start(): void {
    this.h.enable();
  }

  stop(): void {
    this.h.disable();
  }

  /** The delay since the previous sample; resets the window. */
  sample(): LoopDelay {
    const ms = (ns: number) => Math.round((ns / 1e6) * 10) / 10;
    const max = this.h.count > 0 ? ms(this.h.max) : 0;
    const p99 = this.h.count > 0 ? ms(this.h.percentile(99)) : 0;
    this.maxEver = Math.max(this.maxEver, max);
    this.h.reset();
    return { p99_ms: p99, max_ms: max, max_ever_ms: this.maxEver };
  }
}
