// What `ic status` says of capacity that follows demand (docs/capacity.md): each replica set's policy
// and how many replicas it keeps and serves, the models loaded on demand with their keep_alive, and
// the last decisions with their reasons (from the event log). Pure: the verb fetches.
import type { ControlEvent, StateDocument } from "@ic/protocol";
import { table } from "./format.ts";

/** One record of GET /events. */
export interface EventRecord {
  readonly at: number;
  readonly type: string;
  readonly event: ControlEvent;
}

/** A keep_alive in words: "never", "after each answer", "5 min", "30 s". */
export function keepAliveWords(ms: number | undefined): string {
  if (ms === undefined || ms < 0) return "never";
  if (ms === 0) return "after each answer";
  if (ms % 60_000 === 0) return `${ms / 60_000} min`;
  return `${Math.round(ms / 100) / 10} s`;
}

/** The capacity decisions among `records`, newest last: loads, unloads and scaling steps. */
export function decisions(records: readonly EventRecord[]): string[] {
  const out: { at: number; line: string }[] = [];
  for (const r of records) {
    const e = r.event;
    if (e.type === "DeploymentCreated" && (e.deployment.on_demand || e.reason)) {
      const why = e.reason ?? "loaded on demand";
      out.push({ at: r.at, line: `+ ${e.deployment.model_id}: ${why}` });
    } else if (e.type === "DeploymentRetiring" || e.type === "DeploymentRecalled") {
      const what = e.type === "DeploymentRetiring" ? "retires" : "recalled";
      out.push({ at: r.at, line: `~ ${e.deployment_id} ${what}: ${e.reason}` });
    } else if (e.type === "DeploymentDeleted" && e.cause) {
      out.push({ at: r.at, line: `- ${e.deployment_id} (${e.cause}): ${e.reason}` });
    }
  }
  return out
    .sort((a, b) => a.at - b.at)
    .map((d) => `${new Date(d.at).toISOString().slice(11, 19)} ${d.line}`);
}

/** The capacity section of `ic status`, or "" when nothing follows demand. */
export function capacityLines(
  s: Pick<StateDocument, "deployments" | "replica_sets">,
  recent: readonly string[],
  last = 5,
): string {
  const parts: string[] = [];
  const scaled = s.replica_sets.filter((r) => r.scale);
  if (scaled.length > 0)
    parts.push(
      table(
        ["REPLICA SET", "MODEL", "REPLICAS", "GROWS ABOVE", "READY / TARGET", "IN FLIGHT"],
        scaled.map((r) => [
          r.replica_set,
          r.model_id,
          `${r.scale!.min_replicas}-${r.scale!.max_replicas}`,
          `${r.scale!.up_at} per replica`,
          `${r.ready} / ${r.target}${r.retiring ? ` (${r.retiring} retiring)` : ""}`,
          String(r.outstanding),
        ]),
      ),
    );
  const idle = s.deployments.filter((d) => d.on_demand || (d.keep_alive_ms ?? -1) >= 0);
  if (idle.length > 0)
    parts.push(
      table(
        ["LOADED", "MODEL", "HOW", "UNLOADED WHEN IDLE"],
        idle.map((d) => [
          d.instance_id,
          d.model_id,
          d.on_demand ? "on demand" : "placed",
          keepAliveWords(d.keep_alive_ms),
        ]),
      ),
    );
  if (recent.length > 0) parts.push(["capacity decisions:", ...recent.slice(-last)].join("\n"));
  return parts.join("\n\n");
}
