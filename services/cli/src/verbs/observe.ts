// The verbs that look at what a node did: ic logs (and -f), ic traces.
import { Client } from "../client.ts";
import { intOption, UsageError } from "../args.ts";
import type { Parsed } from "../args.ts";
import { formatLogLine, table } from "../format.ts";
import { instanceId, memberOf, print } from "./common.ts";
import type { Io } from "./common.ts";

export async function verbLogs(p: Parsed, c: Client, io: Io): Promise<number> {
  const tail = intOption("tail", p.values["tail"], { min: 1, max: 5000, fallback: 50 });
  if (p.values["instance"]) {
    if (p.values["follow"])
      throw new UsageError("-f follows a node's own log; a runner's log is read with --tail");
    const rank = intOption("rank", p.values["rank"], { min: 0, max: 1024, fallback: 0 });
    const id = await instanceId(c, p.values["instance"] as string);
    const r = await c.get<{ lines: string[]; file: string; node: { name: string } }>(
      `/instances/${encodeURIComponent(id)}/logs?rank=${rank}&tail=${tail}`,
    );
    print(io, p, r, () => r.lines.join("\n"));
    return 0;
  }
  const q = new URLSearchParams({ tail: String(tail) });
  if (p.values["level"]) q.set("level", p.values["level"] as string);
  // Another node's own log: asked at its API (the runner logs above come through any node).
  const at = p.values["node"] ? c.at((await memberOf(c, p.values["node"] as string)).api_url) : c;
  if (p.values["follow"]) return followLogs(at, io, p, q);
  const r = await at.get<{ lines: Record<string, unknown>[] }>(`/logs?${q.toString()}`);
  print(io, p, r, () => r.lines.map(formatLogLine).join("\n"));
  return 0;
}

/** `ic logs -f`: the node's tail, then every new line as the node writes it, until Ctrl-C. */
async function followLogs(c: Client, io: Io, p: Parsed, q: URLSearchParams): Promise<number> {
  q.set("follow", "1");
  // No deadline: a follower stays until the user leaves or the node goes.
  const r = await c.raw("GET", `/logs?${q.toString()}`, undefined, 2_147_483_647);
  if (!r.ok) {
    throw await Client.errorOf(r);
  }
  const decoder = new TextDecoder();
  let buf = "";
  for await (const chunk of r.body!) {
    buf += decoder.decode(chunk as Uint8Array, { stream: true });
    let at;
    while ((at = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, at).split("\n");
      buf = buf.slice(at + 2);
      const data = ev.find((l) => l.startsWith("data: "))?.slice(6);
      if (data === undefined) continue; // a keepalive comment
      if (ev.includes("event: dropped")) {
        const n = (JSON.parse(data) as { dropped?: number }).dropped ?? 0;
        io.err(`… ${n} line(s) dropped: this terminal read slower than the node logged`);
        continue;
      }
      let line: Record<string, unknown>;
      try {
        line = JSON.parse(data) as Record<string, unknown>;
      } catch {
        line = { raw: data };
      }
      io.out(p.json ? JSON.stringify(line) : formatLogLine(line));
    }
  }
  io.err("the node closed the log stream");
  return 1;
}

export async function verbTraces(p: Parsed, c: Client, io: Io): Promise<number> {
  if (p.positionals[0]) {
    const r = await c.get<Record<string, unknown>>(
      `/v1/traces/cluster/${encodeURIComponent(p.positionals[0])}/stats`,
    );
    print(io, p, r, () =>
      table(
        ["FIELD", "VALUE"],
        Object.entries(r).map(([k, v]) => [
          k,
          typeof v === "object" ? JSON.stringify(v) : String(v),
        ]),
      ),
    );
    return 0;
  }
  const limit = intOption("limit", p.values["limit"], { min: 1, max: 1000, fallback: 20 });
  const r = await c.get<{
    traces: { taskId: string; createdAt: string; modelId: string; node: string }[];
  }>(`/v1/traces/cluster?limit=${limit}`);
  print(io, p, r, () =>
    r.traces.length
      ? table(
          ["TASK", "CREATED", "MODEL", "NODE"],
          r.traces.map((t) => [t.taskId, t.createdAt, t.modelId, t.node]),
        )
      : "no traces (tracing is off unless PUT /v1/tracing turned it on)",
  );
  return 0;
}
