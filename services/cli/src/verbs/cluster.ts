// The verbs about the cluster as a whole: ic start (the local cluster), ic status, ic doctor.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { Client } from "../client.ts";
import { intOption } from "../args.ts";
import type { Parsed } from "../args.ts";
import { ago, bytes, table } from "../format.ts";
import { evaluate, gather } from "../doctor.ts";
import { capacityLines, decisions } from "../capacity.ts";
import type { EventRecord } from "../capacity.ts";
import { INSTANCE_KIND_TABLE, kindOf } from "@ic/protocol";
import { print } from "./common.ts";
import type { Io, StateDoc } from "./common.ts";

const ROOT = fileURLToPath(new URL("../../..", import.meta.url));

/** `ic start`: `npm start`'s local cluster, in this terminal. */
export function verbStart(p: Parsed): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      ["--import", "tsx", `${ROOT}packages/launcher/src/cli.ts`, "start", ...p.rest],
      { cwd: ROOT, stdio: "inherit" },
    );
    child.on("exit", (code) => resolve(code ?? 1));
  });
}

/** The last capacity decisions from the event log; none when it cannot be read (a token's scope). */
async function recentDecisions(c: Client): Promise<string[]> {
  const read = (type: string) =>
    c
      .get<{ records: EventRecord[] }>(`/events?type=${type}&limit=50`)
      .then((r) => r.records)
      .catch(() => [] as EventRecord[]);
  const types = [
    "DeploymentCreated",
    "DeploymentRetiring",
    "DeploymentRecalled",
    "DeploymentDeleted",
  ];
  return decisions((await Promise.all(types.map(read))).flat());
}

export async function verbStatus(p: Parsed, c: Client, io: Io): Promise<number> {
  const s = await c.get<StateDoc>("/state");
  const recent = p.json ? [] : await recentDecisions(c);
  print(io, p, s, () => {
    const heard = new Map(s.topology.nodes.map((t) => [t.node_id, t]));
    const nodes = table(
      ["NODE", "ROLE", "HEARD", "MEMORY FREE", "GPUS"],
      s.node_identities.map((m) => {
        const t = heard.get(m.node_id);
        return [
          m.name,
          m.is_master ? "master" : "",
          ago(t?.last_heard_ms_ago),
          t?.telemetry
            ? `${bytes(t.telemetry.memory_free_bytes)} / ${bytes(t.telemetry.memory_total_bytes)}`
            : "-",
          String(t?.telemetry?.gpus.length ?? "-"),
        ];
      }),
    );
    const names = new Map(s.node_identities.map((m) => [m.node_id, m.name]));
    const inst = s.instances.length
      ? table(
          ["INSTANCE", "MODEL", "KIND", "SHARDING", "RUNNERS"],
          s.instances.map((i) => [
            i.instance_id,
            i.model_id,
            INSTANCE_KIND_TABLE[kindOf(i)].label,
            i.sharding,
            i.runners
              .map((r) => `${r.rank}@${names.get(r.node_id) ?? r.node_id}:${r.state}`)
              .join(" "),
          ]),
        )
      : "no instances";
    const health = s.nodeHealth.length
      ? s.nodeHealth.map((h) => `${h.severity} ${h.node_name} ${h.code}: ${h.message}`).join("\n")
      : "nodeHealth: nothing to report";
    const capacity = capacityLines(s, recent);
    return [
      `session ${s.session?.session_id ?? "(none)"}, ${s.node_identities.length} node(s)`,
      "",
      nodes,
      "",
      inst,
      ...(capacity ? ["", capacity] : []),
      "",
      health,
    ].join("\n");
  });
  return 0;
}

export async function verbDoctor(p: Parsed, c: Client, io: Io): Promise<number> {
  const expectNodes =
    p.values["expect-nodes"] === undefined
      ? undefined
      : intOption("expect-nodes", p.values["expect-nodes"], { min: 1, max: 10_000, fallback: 1 });
  const checks = evaluate(await gather(c, { expectNodes }));
  print(io, p, checks, () =>
    checks.map((k) => `${k.ok ? "✓" : "✗"} ${k.name.padEnd(16)} ${k.detail}`).join("\n"),
  );
  return checks.every((k) => k.ok) ? 0 : 1;
}
