// The chat path's task commands (CreateTask, FinishTask), gathered so that the requests of a burst
// reach the engine before their bookkeeping runs, a burst's commands share one write, and finished
// tasks ride on the next CreateTask instead of costing a bus round each (see TaskReports).
import { MAX_FINISHED_PER_COMMAND } from "@ic/protocol";
import type { Command, CommandReply, FinishedTask, TaskId } from "@ic/protocol";
import type { ClusterView } from "@ic/protocol";

/**
 * Longest a finished task waits for the next CreateTask before it is reported on its own. Under
 * steady traffic the next request carries the reports much sooner; the bound matters only when
 * traffic pauses, and then costs at most one wake-up per period (a short one would cost one per
 * request whenever requests are further apart than it). Meanwhile only the master's task table
 * holds it open: balancing counts requests in flight (RequestLoad), which ended already.
 */
export const FINISH_DELAY_MS = 250;

type CreateTask = Extract<Command, { type: "CreateTask" }>;
type Reply = Extract<CommandReply, { ok: true }>;

/**
 * Every command the master sequences is one publish on the bus, and on the master's own node
 * nats-server's echo of it wakes the node once more: per chat request, two writes and two wake-ups
 * (each ~0.1-0.2 ms of CPU on a small VM), and on the master node each command's work (apply, event
 * log, publish) runs at once, ahead of whatever else is ready. So:
 * - a CreateTask waits for the end of the current event-loop turn (setImmediate): the other requests
 *   that became ready in the same turn are on their way to the engine first, and the turn's commands
 *   are sent together (on the master, their events go out in one write);
 * - a finished task waits for the next CreateTask batch, whose first CreateTask carries it
 *   (`finished`), or FINISH_DELAY_MS, after which it goes as a FinishTask of its own.
 * Invariants: every held report is sent by the next batch or the delay, whichever comes first, and
 * each once, ahead of the batch's new tasks (the master ends a CreateTask's `finished` first); only
 * tasks that ended well wait (the caller reports a failed task at once). Neither changes the
 * replicated log: the master keeps tasks.
 */
export class TaskReports {
  /** Ended well, with the tokens used where a limit counts them. */
  private readonly finished = new Map<TaskId, number | undefined>();
  private timer: NodeJS.Timeout | undefined;
  private creates: {
    cmd: CreateTask;
    resolve: (r: Reply) => void;
    reject: (e: unknown) => void;
  }[] = [];
  private scheduled = false;

  constructor(
    private readonly cluster: Pick<ClusterView, "command">,
    private readonly delayMs = FINISH_DELAY_MS,
  ) {}

  /** Sends `cmd` at the end of this event-loop turn, with the held reports and the turn's others. */
  create(cmd: CreateTask): Promise<Reply> {
    return new Promise((resolve, reject) => {
      this.creates.push({ cmd, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.send());
      }
    });
  }

  /** A task that ended well (and the tokens it used, for a token's limit): reported with the next batch. */
  finish(id: TaskId, tokens?: number): void {
    this.finished.set(id, tokens);
    if (this.timer === undefined) {
      this.timer = setTimeout(() => this.flushFinished(), this.delayMs);
      // A report waiting never keeps the process alive.
      this.timer.unref();
    }
  }

  private send(): void {
    this.scheduled = false;
    const creates = this.creates;
    this.creates = [];
    // The held reports ride on the turn's first CreateTask (one bus round per request instead of
    // two); what one command cannot carry goes as FinishTasks. Lost with a CreateTask that never
    // reaches the master, they expire there, as a lost FinishTask does.
    const first = creates[0];
    if (first && this.finished.size > 0) {
      const finished: FinishedTask[] = [];
      for (const [task_id, tokens] of this.finished) {
        if (finished.length === MAX_FINISHED_PER_COMMAND) break;
        finished.push({ task_id, ...(tokens !== undefined ? { tokens } : {}) });
        this.finished.delete(task_id);
      }
      first.cmd = { ...first.cmd, finished };
    }
    this.flushFinished();
    for (const c of creates) this.cluster.command(c.cmd).then(c.resolve, c.reject);
  }

  private flushFinished(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.finished.size === 0) return;
    const ended = [...this.finished];
    this.finished.clear();
    for (const [task_id, tokens] of ended)
      this.cluster
        .command({ type: "FinishTask", task_id, ...(tokens !== undefined ? { tokens } : {}) })
        .catch(() => {});
  }
}
