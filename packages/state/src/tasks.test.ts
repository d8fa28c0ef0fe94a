import { describe, expect, it } from "vitest";
import type { CommandId, InstanceId, ModelId, NodeId, Task, TaskId } from "@ic/protocol";
import { TaskTable } from "./tasks.ts";

const task = (n: number, instance = "i-a", gateway = "n-1", at = n): Task => ({
  task_id: `t-${n}` as TaskId,
  command_id: `c-${n}` as CommandId,
  model_id: "org/m" as ModelId,
  instance_id: instance as InstanceId,
  gateway_node_id: gateway as NodeId,
  created_at: at,
});

describe("TaskTable", () => {
  it("keeps open tasks until they end, and finds them by instance", () => {
    const t = new TaskTable();
    t.add(task(1, "i-a"));
    t.add(task(2, "i-b"));
    t.add(task(3, "i-a"));
    expect(t.onInstances(new Set(["i-a"])).map((x) => x.task_id)).toEqual(["t-1", "t-3"]);
    expect(t.end("t-1" as TaskId)).toBe(true);
    expect(t.end("t-1" as TaskId)).toBe(false);
    expect(t.size).toBe(2);
  });

  it("is bounded by count (the oldest goes) and by age", () => {
    const t = new TaskTable({ maxTasks: 3, maxAgeMs: 100 });
    for (let i = 1; i <= 5; i++) t.add(task(i, "i-a", "n-1", i * 10));
    expect(t.onInstances(new Set(["i-a"])).map((x) => x.task_id)).toEqual(["t-3", "t-4", "t-5"]);
    expect(t.expire(140)).toBe(1); // t-3 (created at 30) is older than 100 ms
    expect(t.size).toBe(2);
  });

  it("drops what a departed gateway held", () => {
    const t = new TaskTable();
    t.add(task(1, "i-a", "n-1"));
    t.add(task(2, "i-a", "n-2"));
    expect(t.dropGateway("n-1" as NodeId)).toBe(1);
    expect(t.onInstances(new Set(["i-a"])).map((x) => x.task_id)).toEqual(["t-2"]);
  });
});
