// A FIFO lock: admission and transfer run one at a time, so two capacity checks never count the
// same free bytes (spec rule 6: base and companion transfers are admitted one at a time).
export class Serial {
  private tail: Promise<unknown> = Promise.resolve();
  private waiting = 0;

  /** Number of callers queued or running. */
  get depth(): number {
    return this.waiting;
  }

  run<T>(fn: () => Promise<T>): Promise<T> {
    this.waiting++;
    const result = this.tail.then(fn, fn);
    this.tail = result.then(
      () => undefined,
      () => undefined,
    );
    return result.finally(() => {
      this.waiting--;
    });
  }
}
