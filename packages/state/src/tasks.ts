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
  /** Open tasks per limited token (Task.token): what concurrent_requests counts. */
  private readonly perToken = new Map<string, number>();
  /** Open tasks per instance: what an unload checks. */
  private readonly perInstance = new Map<string, number>();

  constructor(private readonly bounds: TaskBounds = DEFAULT_TASK_BOUNDS) {}

  get size(): number {
    return this.tasks.size;
  }

  add(task: Task): void {
    this.remove(task.task_id);
    this.tasks.set(task.task_id, task);
    this.perInstance.set(task.instance_id, (this.perInstance.get(task.instance_id) ?? 0) + 1);
    if (task.token !== undefined)
      this.perToken.set(task.token, (this.perToken.get(task.token) ?? 0) + 1);
    while (this.tasks.size > this.bounds.maxTasks) {
      const oldest = this.tasks.keys().next().value as TaskId;
      this.remove(oldest);
    }
  }

  /** The task ended (finished, failed): the task, or undefined when it was not open. */
  end(id: TaskId): Task | undefined {
    return this.remove(id);
  }

  /** Open tasks on an instance. */
  openOn(instanceId: string): number {
    return this.perInstance.get(instanceId) ?? 0;
  }

  /** Open tasks of a limited token. */
  openFor(token: string): number {
    return this.perToken.get(token) ?? 0;
  }

  private remove(id: TaskId): Task | undefined {
    const t = this.tasks.get(id);
    if (!t) return undefined;
    this.tasks.delete(id);
    const left = (this.perInstance.get(t.instance_id) ?? 1) - 1;
    if (left > 0) this.perInstance.set(t.instance_id, left);
    else this.perInstance.delete(t.instance_id);
    if (t.token !== undefined) {
      const n = (this.perToken.get(t.token) ?? 1) - 1;
      if (n > 0) this.perToken.set(t.token, n);
      else this.perToken.delete(t.token);
    }
    return t;
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
        this.remove(id);
        n++;
      }
    return n;
  }

  /** Drops tasks older than the age bound; returns how many. */
  expire(now: number): number {
    let n = 0;
    for (const [id, t] of this.tasks) {
      if (now - t.created_at <= this.bounds.maxAgeMs) break;
      this.remove(id);
      n++;
    }
    return n;
  }

  clear(): void {
    this.tasks.clear();
    this.perToken.clear();
    this.perInstance.clear();
  }
}
