import { describe, expect, it } from "vitest";
import type { InstanceId, ModelId } from "@ic/protocol";
import { capacityLines, decisions, keepAliveWords } from "./capacity.ts";
import type { EventRecord } from "./capacity.ts";

const dep = {
  deployment_id: "d-1",
  model_id: "org/m" as ModelId,
  min_nodes: 1,
  sharding: "Pipeline" as const,
  excluded_peer_keys: [],
  created_at: 0,
  instance_id: "i-1" as InstanceId,
  status: "Placed" as const,
};

describe("ic status: capacity", () => {
  it.each([
    [undefined, "never"],
    [-1, "never"],
    [0, "after each answer"],
    [300_000, "5 min"],
    [1500, "1.5 s"],
  ])("keep_alive %j reads %s", (ms, words) => expect(keepAliveWords(ms)).toBe(words));

  it("lists sets that follow load, what loads on demand, and the last decisions", () => {
    const text = capacityLines(
      {
        deployments: [
          { ...dep, on_demand: true, keep_alive_ms: 0 },
          { ...dep, deployment_id: "d-2", instance_id: "i-2" as InstanceId },
        ],
        replica_sets: [
          {
            replica_set: "rs-1",
            model_id: "org/m",
            scale: { min_replicas: 1, max_replicas: 3, up_at: 4 },
            target: 2,
            ready: 1,
            retiring: 0,
            outstanding: 9,
          },
          {
            replica_set: "rs-3",
            model_id: "org/m",
            scale: { min_replicas: 1, max_replicas: 3, up_at: 4 },
            target: 1,
            ready: 2,
            retiring: 1,
            outstanding: 1,
          },
          {
            replica_set: "rs-2",
            model_id: "org/m",
            target: 2,
            ready: 2,
            retiring: 0,
            outstanding: 0,
          },
        ],
      },
      ["a", "b", "c"],
      2,
    );
    expect(text).toMatch(/rs-1 +org\/m +1-3 +4 per replica +1 \/ 2 +9/);
    expect(text).toMatch(/rs-3 +org\/m +1-3 +4 per replica +2 \/ 1 \(1 retiring\) +1/);
    expect(text).not.toContain("rs-2");
    expect(text).toMatch(/i-1 +org\/m +on demand +after each answer/);
    expect(text).not.toContain("i-2");
    expect(text.endsWith("capacity decisions:\nb\nc")).toBe(true);
    expect(capacityLines({ deployments: [dep], replica_sets: [] }, [])).toBe("");
  });

  it("reads the decisions from the event log, newest last, with their reasons", () => {
    const records: EventRecord[] = [
      {
        at: Date.UTC(2026, 0, 1, 10, 0, 2),
        type: "DeploymentDeleted",
        event: {
          type: "DeploymentDeleted",
          deployment_id: "d-1",
          reason: "idle for 5 s",
          cause: "idle",
        },
      },
      {
        at: Date.UTC(2026, 0, 1, 10, 0, 1),
        type: "DeploymentCreated",
        event: { type: "DeploymentCreated", deployment: { ...dep, on_demand: true } },
      },
      {
        at: Date.UTC(2026, 0, 1, 10, 0, 3),
        type: "DeploymentDeleted",
        event: { type: "DeploymentDeleted", deployment_id: "d-9", reason: "deleted by request" },
      },
      {
        at: Date.UTC(2026, 0, 1, 10, 0, 4),
        type: "DeploymentRetiring",
        event: { type: "DeploymentRetiring", deployment_id: "d-3", since: 4, reason: "quiet" },
      },
      {
        at: Date.UTC(2026, 0, 1, 10, 0, 5),
        type: "DeploymentRecalled",
        event: { type: "DeploymentRecalled", deployment_id: "d-3", reason: "busy" },
      },
    ];
    expect(decisions(records)).toEqual([
      "10:00:01 + org/m: loaded on demand",
      "10:00:02 - d-1 (idle): idle for 5 s",
      "10:00:04 ~ d-3 retires: quiet",
      "10:00:05 ~ d-3 recalled: busy",
    ]);
  });
});
