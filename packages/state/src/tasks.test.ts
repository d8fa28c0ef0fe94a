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
    expect(t.end("t-1" as TaskId)?.task_id).toBe("t-1");
    expect(t.end("t-1" as TaskId)).toBeUndefined();
    expect(t.size).toBe(2);
  });

  it("counts each instance's open tasks through every way a task leaves", () => {
    const t = new TaskTable({ maxTasks: 3, maxAgeMs: 100 });
    t.add(task(1, "i-a", "n-1", 0));
    t.add(task(2, "i-a", "n-2", 50));
    t.add(task(2, "i-a", "n-2", 50)); // the same task twice counts once
    t.add(task(3, "i-b", "n-1", 60));
    expect([t.openOn("i-a"), t.openOn("i-b"), t.openOn("i-c")]).toEqual([2, 1, 0]);
    expect(t.expire(120)).toBe(1);
    expect(t.openOn("i-a")).toBe(1);
    t.dropGateway("n-2" as NodeId);
    expect(t.openOn("i-a")).toBe(0);
    t.add(task(4, "i-b", "n-1", 70));
    t.add(task(5, "i-b", "n-1", 70));
    t.add(task(6, "i-b", "n-1", 70)); // past maxTasks: task 3 goes
    expect(t.openOn("i-b")).toBe(3);
    t.end("t-4" as TaskId);
    expect(t.openOn("i-b")).toBe(2);
    t.clear();
    expect(t.openOn("i-b")).toBe(0);
  });

  it("is bounded by count (the oldest goes) and by age", () => {
    const t = new TaskTable({ maxTasks: 3, maxAgeMs: 100 });
    for (let i = 1; i <= 5; i++) t.add(task(i, "i-a", "n-1", i * 10));
    expect(t.onInstances(new Set(["i-a"])).map((x) => x.task_id)).toEqual(["t-3", "t-4", "t-5"]);
    expect(t.expire(140)).toBe(1); // t-3 (created at 30) is older than 100 ms
    expect(t.size).toBe(2);
  });

  it("counts each limited token's open tasks through every way a task leaves", () => {
    const t = new TaskTable({ maxTasks: 4, maxAgeMs: 100 });
    const of = (n: number, token: string, gateway = "n-1", at = n) => ({
      ...task(n, "i-a", gateway, at),
      token,
    });
    t.add(of(1, "alice", "n-1", 0));
    t.add(of(2, "alice", "n-2", 50));
    t.add(of(3, "bob", "n-2", 60));
    t.add(task(4, "i-a", "n-1", 70)); // no token: not counted
    t.add(of(3, "bob", "n-2", 60)); // the same task twice counts once
    expect([t.openFor("alice"), t.openFor("bob"), t.openFor("carol")]).toEqual([2, 1, 0]);
    expect(t.expire(120)).toBe(1); // alice's first
    expect(t.openFor("alice")).toBe(1);
    expect(t.dropGateway("n-2" as NodeId)).toBe(2);
    expect([t.openFor("alice"), t.openFor("bob")]).toEqual([0, 0]);
    t.add(of(5, "alice", "n-1", 80));
    t.add(of(6, "alice", "n-1", 80));
    t.add(of(7, "alice", "n-1", 80));
    t.add(of(8, "alice", "n-1", 80));
    t.add(of(9, "alice", "n-1", 80)); // past maxTasks: task 4 goes, then alice's task 5
    expect(t.size).toBe(4);
    expect(t.openFor("alice")).toBe(4);
    t.end("t-6" as TaskId);
    expect(t.openFor("alice")).toBe(3);
    t.clear();
    expect(t.openFor("alice")).toBe(0);
  });

  it("drops what a departed gateway held", () => {
    const t = new TaskTable();
    t.add(task(1, "i-a", "n-1"));
    t.add(task(2, "i-a", "n-2"));
    expect(t.dropGateway("n-1" as NodeId)).toBe(1);
    expect(t.onInstances(new Set(["i-a"])).map((x) => x.task_id)).toEqual(["t-2"]);
  });
});
