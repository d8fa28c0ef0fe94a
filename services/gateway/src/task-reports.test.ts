// TaskReports: a turn's CreateTasks go out together at its end, the first carrying the held reports
// of finished tasks; held reports go out with the next batch or after the delay, each once.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Command, CommandId, InstanceId, ModelId, TaskId } from "@ic/protocol";
import { MAX_FINISHED_PER_COMMAND } from "@ic/protocol";
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
  sent.map((c) =>
    c.type === "CreateTask"
      ? `CreateTask:${c.command_id}${c.finished ? `+${c.finished.map((f) => f.task_id).join(",")}` : ""}`
      : `${c.type}:${"task_id" in c ? c.task_id : ""}`,
  );

describe("TaskReports", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("sends a turn's CreateTasks together at its end, the first carrying the held reports", async () => {
    const { sent, cluster } = recorder();
    const r = new TaskReports(cluster);
    r.finish(t(1));
    r.finish(t(2), 42);
    const a = r.create(create(1));
    const b = r.create(create(2));
    expect(sent).toEqual([]);
    await vi.advanceTimersToNextTimerAsync();
    expect(kinds(sent)).toEqual(["CreateTask:c-1+t-1,t-2", "CreateTask:c-2"]);
    expect((sent[0] as { finished: unknown }).finished).toEqual([
      { task_id: "t-1" },
      { task_id: "t-2", tokens: 42 },
    ]);
    expect((await a).task_id).toBe("t-for-c-1");
    expect((await b).task_id).toBe("t-for-c-2");
    // Nothing is sent twice: the delay's timer was cleared with the reports.
    await vi.advanceTimersByTimeAsync(FINISH_DELAY_MS * 2);
    expect(sent).toHaveLength(2);
  });

  it("one CreateTask carries at most MAX_FINISHED_PER_COMMAND reports; the rest go as FinishTasks", async () => {
    const { sent, cluster } = recorder();
    const r = new TaskReports(cluster);
    for (let i = 0; i < MAX_FINISHED_PER_COMMAND + 2; i++) r.finish(t(i));
    void r.create(create(1));
    await vi.advanceTimersToNextTimerAsync();
    const carried = (sent.find((c) => c.type === "CreateTask") as { finished: unknown[] }).finished;
    expect(carried).toHaveLength(MAX_FINISHED_PER_COMMAND);
    expect(kinds(sent.filter((c) => c.type === "FinishTask"))).toEqual([
      `FinishTask:t-${MAX_FINISHED_PER_COMMAND}`,
      `FinishTask:t-${MAX_FINISHED_PER_COMMAND + 1}`,
    ]);
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
    const { sent, cluster } = recorder(true);
    const r = new TaskReports(cluster);
    r.finish(t(1));
    const caught = r.create(create(1)).catch((e: unknown) => e);
    await vi.advanceTimersToNextTimerAsync();
    expect(await caught).toBeInstanceOf(Error);
    await vi.advanceTimersByTimeAsync(FINISH_DELAY_MS * 2);
    expect(kinds(sent)).toEqual(["CreateTask:c-1+t-1"]);
  });
});
