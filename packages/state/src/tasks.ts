// The master's table of open chat tasks. Followers need none of it, so it stays off the replicated
// log: a task costs the cluster one request to the master, not an event on every node. Bounded by
// count and age; a task whose gateway never reported its end expires.
import type { InstanceId, NodeId, Task, TaskId } from "@ic/protocol";

export interface TaskBounds {
  /** Open tasks kept at most; past it the oldest is dropped (a lost end report). */
  readonly maxTasks: number;
  /** A task older than this is dropped (its gateway's bound on a request has passed). */
  readonly maxAgeMs: number;
}

export const DEFAULT_TASK_BOUNDS: TaskBounds = { maxTasks: 100_000, maxAgeMs: 3_600_000 };

export class TaskTable {
  /** In creation order (Map keeps insertion order): the oldest first. */
  private readonly tasks = new Map<TaskId, Task>();

  constructor(private readonly bounds: TaskBounds = DEFAULT_TASK_BOUNDS) {}

  get size(): number {
    return this.tasks.size;
  }

  add(task: Task): void {
    this.tasks.set(task.task_id, task);
    while (this.tasks.size > this.bounds.maxTasks) {
      const oldest = this.tasks.keys().next().value as TaskId;
      this.tasks.delete(oldest);
    }
  }

  /** The task ended (finished, failed); false when it was not open. */
  end(id: TaskId): boolean {
    return this.tasks.delete(id);
  }

  /** Open tasks on any of these instances, oldest first. */
  onInstances(ids: ReadonlySet<InstanceId | string>): Task[] {
    const out: Task[] = [];
    for (const t of this.tasks.values()) if (ids.has(t.instance_id)) out.push(t);
    return out;
  }

  /** Drops the open tasks a gateway holds (it left: its clients' connections went with it). */
  dropGateway(node: NodeId): number {
    let n = 0;
    for (const [id, t] of this.tasks)
      if (t.gateway_node_id === node) {
        this.tasks.delete(id);
        n++;
      }
    return n;
  }

  /** Drops tasks older than the age bound; returns how many. */
  expire(now: number): number {
    let n = 0;
    for (const [id, t] of this.tasks) {
      if (now - t.created_at <= this.bounds.maxAgeMs) break;
      this.tasks.delete(id);
      n++;
    }
    return n;
  }

  clear(): void {
    this.tasks.clear();
  }
}
