// TaskReports: a turn's CreateTasks go out together at its end, after the held FinishTasks; held
// reports go out with the next batch or after the delay, each once; the balancing skips held tasks.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Command, CommandId, InstanceId, ModelId, NodeId, Task, TaskId } from "@ic/protocol";
import { outstandingByInstance } from "./balancing.ts";
import { FINISH_DELAY_MS, TaskReports } from "./task-reports.ts";

function recorder(fail = false) {
  const sent: Command[] = [];
  return {
    sent,
    cluster: {
      command: (cmd: Command) => {
        sent.push(cmd);
        if (fail) return Promise.reject(new Error("no master"));
        return Promise.resolve({
          ok: true as const,
          index: sent.length,
          ...(cmd.type === "CreateTask" ? { task_id: `t-for-${cmd.command_id}` as TaskId } : {}),
        });
      },
    },
  };
}

const t = (n: number) => `t-${n}` as TaskId;
const create = (n: number) => ({
  type: "CreateTask" as const,
  command_id: `c-${n}` as CommandId,
  model_id: "m" as ModelId,
  instance_id: "i" as InstanceId,
});
const kinds = (sent: Command[]) =>
  sent.map(
    (c) => `${c.type}:${"task_id" in c ? c.task_id : (c as { command_id: string }).command_id}`,
  );

describe("TaskReports", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("sends a turn's CreateTasks together at its end, after the held FinishTasks", async () => {
    const { sent, cluster } = recorder();
    const r = new TaskReports(cluster);
    r.finish(t(1));
    const a = r.create(create(1));
    const b = r.create(create(2));
    expect(sent).toEqual([]);
    expect(r.has("t-1")).toBe(true);
    await vi.advanceTimersToNextTimerAsync();
    expect(kinds(sent)).toEqual(["FinishTask:t-1", "CreateTask:c-1", "CreateTask:c-2"]);
    expect(r.has("t-1")).toBe(false);
    expect((await a).task_id).toBe("t-for-c-1");
    expect((await b).task_id).toBe("t-for-c-2");
    await vi.advanceTimersByTimeAsync(FINISH_DELAY_MS * 2);
    expect(sent).toHaveLength(3);
  });

  it("sends held reports after the delay when no request follows", () => {
    const { sent, cluster } = recorder();
    const r = new TaskReports(cluster);
    r.finish(t(1));
    vi.advanceTimersByTime(FINISH_DELAY_MS - 1);
    expect(sent).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(kinds(sent)).toEqual(["FinishTask:t-1"]);
    r.finish(t(2));
    vi.advanceTimersByTime(FINISH_DELAY_MS);
    expect(kinds(sent)).toEqual(["FinishTask:t-1", "FinishTask:t-2"]);
  });

  it("a refused CreateTask rejects its caller; a refused FinishTask is dropped quietly", async () => {
    const { cluster } = recorder(true);
    const r = new TaskReports(cluster);
    r.finish(t(1));
    const caught = r.create(create(1)).catch((e: unknown) => e);
    await vi.advanceTimersToNextTimerAsync();
    expect(await caught).toBeInstanceOf(Error);
    expect(r.has("t-1")).toBe(false);
  });

  it("the balancing does not count a held task as outstanding", async () => {
    const { cluster } = recorder();
    const r = new TaskReports(cluster);
    const task = (n: number, instance: string): Task => ({
      task_id: t(n),
      command_id: `c-${n}` as CommandId,
      model_id: "m" as ModelId,
      instance_id: instance as InstanceId,
      gateway_node_id: "n" as NodeId,
      created_at: 0,
    });
    const tasks = [task(1, "i-a"), task(2, "i-a"), task(3, "i-b")];
    r.finish(t(2));
    expect(Object.fromEntries(outstandingByInstance(tasks, [], r))).toEqual({ "i-a": 1, "i-b": 1 });
    void r.create(create(4));
    await vi.advanceTimersToNextTimerAsync();
    expect(Object.fromEntries(outstandingByInstance(tasks, [], r))).toEqual({ "i-a": 2, "i-b": 1 });
  });
});
