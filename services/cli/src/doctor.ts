// `ic doctor`: the spec's health checklist (node count, disk against the 2 GiB event-log floor, a
// 2-token completion, the drafter acceptance line) plus the engine binary, the bus, the API port and
// peer reachability. `gather` asks the cluster; `evaluate` turns what it found into checks (pure),
// each saying what to fix when it fails.
import { spawnSync } from "node:child_process";
import type { Client } from "./client.ts";
import { ApiError } from "./client.ts";
import { GiB } from "@ic/protocol";
import type { StateDocument as StateDoc } from "@ic/protocol";
import { bytes } from "./format.ts";

export const DISK_FLOOR_BYTES = 2 * GiB;

export interface Check {
  readonly name: string;
  readonly ok: boolean;
  /** What was seen; when failing, what to fix. */
  readonly detail: string;
}

/** Everything doctor looked at; a field is an Error where asking failed. */
export interface Findings {
  readonly url: string;
  readonly health: { ok: boolean; reason?: string } | Error;
  readonly state: StateDoc | Error;
  readonly expectNodes?: number | undefined;
  /** Per node name: its storage report's volume, or why it could not be read. */
  readonly storage: Record<string, { free: number; total: number } | Error>;
  /** Per node name: whether its API answered /v1/ping from here. */
  readonly peers: Record<string, true | Error>;
  /** The ready model used for the completion, and how it went (undefined: none ready). */
  readonly completion?: { model: string; result: { tokens: number } | Error };
  /** Per drafter-using model: the acceptance line of its rank-0 log, or why there is none. */
  readonly drafters: Record<string, string | Error>;
  /** Local nats-server binary (only asked when the node is on this machine). */
  readonly natsServer?: string | Error;
  readonly livenessMs: number;
}

const why = (e: Error) => (e instanceof ApiError ? `${e.code}: ${e.message}` : e.message);

/**
 * Models that fail to run: a deployment Failed (given up) or Failing (moved after a failure), a
 * runner that gave up or keeps crashing, each with the engine's last error line.
 */
function failingModels(s: StateDoc): Check {
  const lines: string[] = [];
  for (const d of s.deployments ?? []) {
    if (d.status === "Failed")
      lines.push(`${d.model_id} failed: ${d.refusal?.message ?? "given up"}`);
    else if (d.status === "Failing") {
      const f = d.failures?.at(-1);
      lines.push(`${d.model_id} is failing${f ? ` (on ${f.node_name}: ${f.error})` : ""}`);
    }
  }
  for (const h of s.nodeHealth)
    if (h.code === "runner_failed" || h.code === "runner_crash_loop")
      lines.push(`${h.node_name}: ${h.message}`);
  for (const i of s.instances)
    for (const r of i.runners)
      if (r.state === "RunnerFailed" && !lines.some((l) => l.includes(i.instance_id)))
        lines.push(
          `${i.model_id} (instance ${i.instance_id}, rank ${r.rank}) failed${r.last_error ? `: ${r.last_error}` : r.reason ? `: ${r.reason}` : ""}`,
        );
  return lines.length === 0
    ? { name: "models", ok: true, detail: "no deployment or runner is failing" }
    : {
        name: "models",
        ok: false,
        detail: `${lines.join("; ")} — read the engine's words, fix or replace the model, and place it again (ic place)`,
      };
}

export function evaluate(f: Findings): Check[] {
  const out: Check[] = [];
  if (f.health instanceof Error) {
    out.push({
      name: "api",
      ok: false,
      detail: `${why(f.health)}; is the node running and is --url right (default http://127.0.0.1:8080)?`,
    });
    return out;
  }
  out.push(
    f.health.ok
      ? { name: "api", ok: true, detail: `${f.url} answers and is in a session` }
      : {
          name: "api",
          ok: false,
          detail: `${f.url} answers but is not serving: ${f.health.reason ?? "unknown"}; wait, or see GET /logs`,
        },
  );
  if (f.state instanceof Error) {
    out.push({ name: "state", ok: false, detail: `GET /state failed: ${why(f.state)}` });
    return out;
  }
  return [...out, ...sessionChecks(f, f.state), ...reachChecks(f)];
}

/** The session as GET /state shows it: nodes, the bus, node health, models, engines. */
function sessionChecks(f: Findings, s: Exclude<Findings["state"], Error>): Check[] {
  const out: Check[] = [];
  const n = s.node_identities.length;
  if (f.expectNodes !== undefined)
    out.push(
      n === f.expectNodes
        ? { name: "nodes", ok: true, detail: `${n} node(s) in the session, as expected` }
        : {
            name: "nodes",
            ok: false,
            detail: `${n} node(s) in the session, expected ${f.expectNodes}: start the missing ones, check cluster.peers and the cluster secret`,
          },
    );
  else
    out.push({
      name: "nodes",
      ok: n > 0,
      detail: `${n} node(s): ${s.node_identities.map((m) => m.name).join(", ")}`,
    });
  const silent = s.topology.nodes.filter(
    (t) => t.last_heard_ms_ago === null || t.last_heard_ms_ago > f.livenessMs,
  );
  out.push(
    silent.length === 0
      ? { name: "bus", ok: true, detail: "every node's heartbeat arrives over the bus" }
      : {
          name: "bus",
          ok: false,
          detail: `no recent heartbeat from ${silent.map((t) => t.name).join(", ")}: check its nats-server route port (bus.cluster_port) and the network`,
        },
  );
  const errors = s.nodeHealth.filter((h) => h.severity === "error");
  out.push(
    errors.length === 0
      ? { name: "node health", ok: true, detail: "no error in nodeHealth" }
      : {
          name: "node health",
          ok: false,
          detail: errors
            .map(
              (h) =>
                `${h.node_name}: ${h.code}: ${h.message}${h.remediation ? ` — ${h.remediation}` : ""}`,
            )
            .join("; "),
        },
  );
  out.push(failingModels(s));
  const badEngine = s.topology.nodes.filter((t) => t.telemetry && !t.telemetry.engine.usable);
  out.push(
    badEngine.length === 0
      ? { name: "engine", ok: true, detail: "every node's llama-server is usable" }
      : {
          name: "engine",
          ok: false,
          detail: badEngine
            .map(
              (t) =>
                `${t.name}: ${t.telemetry!.engine.server_bin ?? "no llama-server"} is not usable: build it (node scripts/build-engine.mjs) or set engine.server_bin`,
            )
            .join("; "),
        },
  );
  return out;
}

/** What this machine checks itself: disks, reaching each node, nats-server, a completion, drafters. */
function reachChecks(f: Findings): Check[] {
  const out: Check[] = [];
  for (const [node, v] of Object.entries(f.storage)) {
    if (v instanceof Error)
      out.push({ name: `disk ${node}`, ok: false, detail: `GET /store/storage failed: ${why(v)}` });
    else
      out.push(
        v.free > DISK_FLOOR_BYTES * 2
          ? { name: `disk ${node}`, ok: true, detail: `${bytes(v.free)} free of ${bytes(v.total)}` }
          : {
              name: `disk ${node}`,
              ok: false,
              detail: `${bytes(v.free)} free: too close to the 2 GiB event-log floor; free space or purge staging (ic purge)`,
            },
      );
  }
  for (const [node, v] of Object.entries(f.peers))
    out.push(
      v === true
        ? { name: `reach ${node}`, ok: true, detail: "its API answers from here" }
        : {
            name: `reach ${node}`,
            ok: false,
            detail: `${why(v)}: check node.host, the API port and firewalls`,
          },
    );
  if (f.natsServer !== undefined)
    out.push(
      f.natsServer instanceof Error
        ? {
            name: "nats-server",
            ok: false,
            detail: `${f.natsServer.message}: apt-get install nats-server`,
          }
        : { name: "nats-server", ok: true, detail: f.natsServer },
    );
  if (!f.completion)
    out.push({
      name: "completion",
      ok: false,
      detail: "no model is ready to answer: place one (ic place <model>)",
    });
  else
    out.push(
      f.completion.result instanceof Error
        ? {
            name: "completion",
            ok: false,
            detail: `${f.completion.model}: ${why(f.completion.result)}`,
          }
        : {
            name: "completion",
            ok: true,
            detail: `${f.completion.model} answered a 2-token completion`,
          },
    );
  for (const [model, v] of Object.entries(f.drafters))
    out.push(
      v instanceof Error
        ? {
            name: `drafter ${model}`,
            ok: false,
            detail: `${why(v)}: speculative decoding is not running; check the drafter's registration and the rank-0 log`,
          }
        : { name: `drafter ${model}`, ok: true, detail: v },
    );
  return out;
}

const DRAFT_LINE = /draft acceptance = [\d.]+ \(\s*\d+ accepted \/\s*\d+ generated\)/;

const asError = (e: unknown) => (e instanceof Error ? e : new Error(String(e)));

/** Asks the cluster everything evaluate needs. */
export async function gather(
  c: Client,
  o: { expectNodes?: number | undefined },
): Promise<Findings> {
  const base = {
    url: c.url,
    storage: {},
    peers: {},
    drafters: {},
    livenessMs: 6000,
    expectNodes: o.expectNodes,
  };
  let health: Findings["health"];
  try {
    const r = await c.raw("GET", "/health", undefined, 5000);
    const body = (await r.json().catch(() => ({}))) as {
      error?: { details?: { reason?: string }; message?: string };
    };
    health = r.ok
      ? { ok: true }
      : {
          ok: false,
          reason: body.error?.details?.reason ?? body.error?.message ?? String(r.status),
        };
  } catch (e) {
    return { ...base, health: asError(e), state: asError(e) };
  }
  let state: StateDoc;
  try {
    state = await c.get<StateDoc>("/state");
  } catch (e) {
    return { ...base, health, state: asError(e) };
  }
  const { storage, peers } = await reachNodes(c, state);
  const completion = await tryCompletion(c);
  const drafters = await drafterChecks(c, state);
  const natsServer = localNatsServer(c.url);
  return {
    ...base,
    health,
    state,
    storage,
    peers,
    completion,
    drafters,
    ...(natsServer ? { natsServer } : {}),
  };
}

/** Each node's API from here (GET /v1/ping) and, when it answers, its models volume. */
async function reachNodes(c: Client, state: StateDoc) {
  const storage: Findings["storage"] = {};
  const peers: Findings["peers"] = {};
  await Promise.all(
    state.node_identities.map(async (m) => {
      const node = c.at(m.api_url);
      try {
        await node.get("/v1/ping", 3000);
        peers[m.name] = true;
      } catch (e) {
        peers[m.name] = asError(e);
        return;
      }
      try {
        const r = await node.get<{ models_volume: { free_bytes: number; total_bytes: number } }>(
          "/store/storage",
          5000,
        );
        storage[m.name] = { free: r.models_volume.free_bytes, total: r.models_volume.total_bytes };
      } catch (e) {
        storage[m.name] = asError(e);
      }
    }),
  );
  return { storage, peers };
}

/** A 2-token completion on the first ready model (none when no model is ready). */
async function tryCompletion(c: Client): Promise<Findings["completion"]> {
  try {
    const models = await c.get<{ data: { id: string }[] }>("/v1/models");
    const model = models.data[0]?.id;
    if (model) {
      try {
        const r = await c.json<{ usage?: { completion_tokens?: number } }>(
          "POST",
          "/v1/chat/completions",
          { model, messages: [{ role: "user", content: "ping" }], max_tokens: 2 },
          60_000,
        );
        return { model, result: { tokens: r.usage?.completion_tokens ?? 0 } };
      } catch (e) {
        return { model, result: asError(e) };
      }
    }
  } catch (e) {
    return { model: "(models list)", result: asError(e) };
  }
  return undefined;
}

/** For each model with a drafter: the draft acceptance line of its rank-0 log. */
async function drafterChecks(c: Client, state: StateDoc): Promise<Findings["drafters"]> {
  const drafters: Findings["drafters"] = {};
  for (const m of state.models.filter((x) => x.drafter)) {
    const inst = state.instances.find((i) => i.model_id === m.model_id);
    if (!inst) continue;
    try {
      const log = await c.get<{ lines: string[] }>(
        `/instances/${inst.instance_id}/logs?rank=0&tail=2000`,
      );
      const line = [...log.lines]
        .reverse()
        .map((l) => DRAFT_LINE.exec(l)?.[0])
        .find(Boolean);
      drafters[m.model_id] =
        line ??
        new Error("no draft acceptance line in the rank-0 log yet (send a completion first)");
    } catch (e) {
      drafters[m.model_id] = asError(e);
    }
  }
  return drafters;
}

/** The nats-server of this machine, when the node asked is local. */
function localNatsServer(url: string): Findings["natsServer"] {
  const host = new URL(url).hostname;
  const local = host === "127.0.0.1" || host === "localhost" || host === "::1" || host === "[::1]";
  if (!local) return undefined;
  const r = spawnSync("nats-server", ["--version"], { encoding: "utf8", timeout: 5000 });
  return r.status === 0
    ? r.stdout.trim()
    : new Error("nats-server is not installed on this machine");
}
