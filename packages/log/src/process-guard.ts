// The process-wide last line of defence: an unhandled rejection is logged with its stack and cause,
// counted, and the process keeps serving; an uncaught exception is logged and ends the process.
// Why the two differ (docs/decisions.md): a rejection that nobody awaited has already unwound its
// async function, so nothing is half-done that the process relies on; a synchronous throw that
// reached the top may have left a loop or a state update half-way, and a restart is the safe answer.
import type { Logger } from "pino";

export interface ProcessGuard {
  /** Unhandled rejections logged since the guard was installed. */
  readonly rejections: () => number;
  /** Removes the handlers (tests). */
  readonly uninstall: () => void;
}

export interface GuardOptions {
  /** Ends the process after an uncaught exception (default: process.exit(1)). */
  readonly exit?: (code: number) => void;
}

/** Installs the handlers on `proc` (the running process by default). */
export function guardProcess(
  log: Logger,
  opts: GuardOptions = {},
  proc: NodeJS.EventEmitter = process,
): ProcessGuard {
  let rejections = 0;
  const onRejection = (reason: unknown, promise: Promise<unknown>) => {
    rejections += 1;
    log.error(
      { err: reason, kind: "unhandledRejection", rejections, promise: String(promise) },
      "unhandled promise rejection; the node keeps serving",
    );
  };
  const onException = (err: Error, origin: string) => {
    log.fatal(
      { err, kind: origin },
      "uncaught exception; the process ends (state may be half-updated)",
    );
    log.flush?.();
    (opts.exit ?? ((c: number) => process.exit(c)))(1);
  };
  proc.on("unhandledRejection", onRejection);
  proc.on("uncaughtException", onException);
  return {
    rejections: () => rejections,
    uninstall: () => {
      proc.off("unhandledRejection", onRejection);
      proc.off("uncaughtException", onException);
    },
  };
}
