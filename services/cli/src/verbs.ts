// What each verb of the ic command does, over the node HTTP API (docs/api.md).
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { ApiError, Client } from "./client.ts";
import { intOption, UsageError } from "./args.ts";
import type { Parsed } from "./args.ts";
import { ago, bytes, formatLogLine, progressBar, purgeText, table, uniqueId } from "./format.ts";
import type { PurgeAnswer } from "./format.ts";
import { evaluate, gather } from "./doctor.ts";

/** Where output goes (tests and the terminal). */
export interface Io {
  /** A line (or lines) of output. */
  out(text: string): void;
  /** Text as it is, no newline added (a streamed answer). */
  write(text: string): void;
  err(text: string): void;
  readonly tty: boolean;
}

interface StateDoc {
  session: { session_id: string } | null;
  this_node: { name: string; is_master: boolean; synced: boolean };
  node_identities: { node_id: string; name: string; api_url: string; is_master: boolean }[];
  nodeHealth: { node_name: string; code: string; severity: string; message: string }[];
  topology: {
    nodes: {
      node_id: string;
      name: string;
      last_heard_ms_ago: number | null;
      telemetry: { memory_free_bytes: number; memory_total_bytes: number; gpus: unknown[] } | null;
    }[];
  };
  models: { model_id: string; bytes: number; layers: number; drafter?: string }[];
  instances: {
    instance_id: string;
    model_id: string;
    sharding: string;
    assignments: { node_id: string; rank: number }[];
    runners: { rank: number; state: string; node_id: string }[];
  }[];
  pulls: Pull[];
}
interface Pull {
  model_id: string;
  quant?: string;
  served_file?: string;
  state: string;
  bytes_done: number;
  bytes_total: number | null;
  error?: { code: string; message: string };
}

const ROOT = fileURLToPath(new URL("../../..", import.meta.url));

/**
 * Waits until the instance's runners are all ready (it serves), printing each change of what it is
 * doing; an ApiError when a runner fails or the instance goes.
 */
async function waitServing(c: Client, id: string, io: Io, p: Parsed): Promise<void> {
  let last = "";
  for (;;) {
    const s = await c.get<{
      instances: {
        instance_id: string;
        assignments: unknown[];
        runners: { rank: number; state: string; reason?: string; last_error?: string }[];
      }[];
    }>("/state");
    const inst = s.instances.find((i) => i.instance_id === id);
    if (!inst) throw new ApiError(410, "instance_lost", `${id} is gone from the cluster`);
    const failed = inst.runners.find((r) => r.state === "RunnerFailed");
    if (failed)
      throw new ApiError(
        500,
        "runner_failed",
        `rank ${failed.rank} of ${id} failed: ${failed.last_error ?? failed.reason ?? "no reason given"}`,
      );
    const now = inst.runners.map((r) => `rank ${r.rank} ${r.state}`).join(", ") || "no runner yet";
    if (now !== last && !p.json) io.out(now);
    last = now;
    const ready = inst.runners.filter((r) => r.state === "RunnerReady").length;
    if (ready > 0 && ready >= inst.assignments.length) {
      if (!p.json) io.out(`${id} serves`);
      return;
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** The files `ic import` sends: the file itself, or a folder's files (hidden ones left out). */
async function importFiles(target: string): Promise<{ abs: string; rel: string; bytes: number }[]> {
  const { readdir, stat } = await import("node:fs/promises");
  const { basename, join, relative } = await import("node:path");
  let st;
  try {
    st = await stat(target);
  } catch {
    throw new UsageError(`${target}: no such file or folder`);
  }
  if (st.isFile()) return [{ abs: target, rel: basename(target), bytes: st.size }];
  const out: { abs: string; rel: string; bytes: number }[] = [];
  const walk = async (dir: string): Promise<void> => {
    for (const e of await readdir(dir, { withFileTypes: true })) {
      if (e.name.startsWith(".")) continue;
      const abs = join(dir, e.name);
      if (e.isDirectory()) await walk(abs);
      else if (e.isFile())
        out.push({ abs, rel: relative(target, abs), bytes: (await stat(abs)).size });
    }
  };
  await walk(target);
  if (!out.some((f) => f.rel.endsWith(".gguf")))
    throw new UsageError(`${target} holds no .gguf file: nothing the engine could load`);
  return out.sort((a, b) => (a.rel < b.rel ? -1 : 1));
}
const print = (io: Io, p: Parsed, value: unknown, text: () => string) =>
  io.out(p.json ? JSON.stringify(value, null, 2) : text());

/** The instance id `ref` names: the whole id, or a prefix only one instance has (ic rm i-1c92). */
async function instanceId(c: Client, ref: string): Promise<string> {
  // A whole id needs no lookup (nor the read scope it takes).
  if (/^i-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(ref)) return ref;
  const r = await c.get<{ instances: { instance_id: string }[] }>("/instances");
  return uniqueId(
    ref,
    r.instances.map((i) => i.instance_id),
    "instance",
  );
}

/**
 * The member a `--node` value names: its name, its node id, or a prefix of the id only one has; a
 * usage error listing the nodes otherwise (never silently the node asked).
 */
async function memberOf(
  c: Client,
  ref: string,
): Promise<{ node_id: string; name: string; api_url: string }> {
  const s = await c.get<StateDoc>("/state");
  const all = s.node_identities;
  const byName = all.filter((m) => m.name === ref);
  const byId = all.filter(
    (m) => m.node_id === ref || (ref.length >= 4 && m.node_id.startsWith(ref)),
  );
  const found = byName.length > 0 ? byName : byId;
  if (found.length === 1) return found[0]!;
  const known = all.map((m) => `${m.name} (${m.node_id})`).join(", ");
  throw new UsageError(
    found.length === 0
      ? `--node: no node is named ${ref}; the nodes are ${known}`
      : `--node: ${ref} names several nodes (${found.map((m) => m.node_id).join(", ")}); use the id`,
  );
}

/** Names nodes for output: `name (n-…)`, the id alone when the node is not a member. */
async function nodeNamer(c: Client): Promise<(id: string) => string> {
  const s = await c.get<StateDoc>("/state");
  const names = new Map(s.node_identities.map((m) => [m.node_id, m.name]));
  return (id) => {
    const name = names.get(id);
    return name ? `${name} (${id})` : id;
  };
}

/** `ic start`: `npm start`'s local cluster, in this terminal. */
function verbStart(p: Parsed): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      ["--import", "tsx", `${ROOT}packages/launcher/src/cli.ts`, "start", ...p.rest],
      { cwd: ROOT, stdio: "inherit" },
    );
    child.on("exit", (code) => resolve(code ?? 1));
  });
}

async function verbStatus(p: Parsed, c: Client, io: Io): Promise<number> {
  const s = await c.get<StateDoc>("/state");
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
          ["INSTANCE", "MODEL", "SHARDING", "RUNNERS"],
          s.instances.map((i) => [
            i.instance_id,
            i.model_id,
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
    return [
      `session ${s.session?.session_id ?? "(none)"}, ${s.node_identities.length} node(s)`,
      "",
      nodes,
      "",
      inst,
      "",
      health,
    ].join("\n");
  });
  return 0;
}

async function verbModels(p: Parsed, c: Client, io: Io): Promise<number> {
  const [s, ready] = await Promise.all([
    c.get<StateDoc>("/state"),
    c.get<{ data: { id: string }[] }>("/v1/models"),
  ]);
  const isReady = new Set(ready.data.map((m) => m.id));
  const rows = s.models.map((m) => ({ ...m, ready: isReady.has(m.model_id) }));
  print(io, p, rows, () =>
    rows.length
      ? table(
          ["MODEL", "SIZE", "LAYERS", "READY"],
          rows.map((m) => [m.model_id, bytes(m.bytes), String(m.layers), m.ready ? "yes" : "no"]),
        )
      : "no models registered (ic pull <org/name>, or copy one into store_path)",
  );
  return 0;
}

async function verbPull(p: Parsed, c: Client, io: Io): Promise<number> {
  // org/repo[:QUANT][@revision]; the node validates each part and says what is wrong.
  const ref = /^([^:@]*)(?::([^@]*))?(?:@(.*))?$/.exec(p.positionals[0]!)!;
  const model = ref[1]!;
  const { pull } = await c.json<{ pull: Pull }>("POST", "/store/pulls", {
    model_id: model,
    ...(ref[2] !== undefined ? { quant: ref[2] } : {}),
    ...(ref[3] !== undefined ? { revision: ref[3] } : {}),
  });
  if (p.values["detach"]) {
    print(io, p, pull, () => `pull of ${model}: ${pull.state}`);
    return 0;
  }
  let cancelled = false;
  const onInt = () => {
    cancelled = true;
    void c.json("DELETE", `/store/pulls/${model}`).catch(() => undefined);
  };
  process.once("SIGINT", onInt);
  try {
    let last = "";
    for (;;) {
      const { pulls } = await c.get<{ pulls: Pull[] }>("/store/pulls");
      const now = pulls.find((x) => x.model_id === model);
      if (!now) throw new ApiError(404, "not_found", `the store host has no pull of ${model}`);
      const what = now.quant ? `${model}:${now.quant}` : model;
      const line = `${what} ${now.state.padEnd(9)} ${progressBar(now.bytes_done, now.bytes_total)}`;
      if (p.json) {
        if (now.state !== "running" && now.state !== "queued") io.out(JSON.stringify(now, null, 2));
      } else if (io.tty) io.err(`\r${line}`);
      else if (line !== last) io.out(line);
      last = line;
      if (now.state === "done") {
        if (io.tty && !p.json) io.err("\n");
        if (!p.json && now.served_file)
          io.out(`pulled ${what}: the engine loads ${now.served_file} (ic place ${model})`);
        return 0;
      }
      if (now.state === "failed" || now.state === "cancelled") {
        if (io.tty && !p.json) io.err("\n");
        if (now.state === "failed")
          throw new ApiError(
            500,
            now.error?.code ?? "failed",
            now.error?.message ?? "the pull failed",
          );
        throw new ApiError(
          499,
          "cancelled",
          cancelled ? "cancelled; ic pull again resumes it" : "cancelled on the store host",
        );
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  } finally {
    process.off("SIGINT", onInt);
  }
}

async function verbImport(p: Parsed, c: Client, io: Io): Promise<number> {
  const id = p.values["as"] as string | undefined;
  if (!id || !/^[^/\s]+\/[^/\s]+$/.test(id))
    throw new UsageError("--as org/name is required: the model id it is served as");
  const files = await importFiles(p.positionals[0]!);
  const where = await c.get<{ name: string; api_url: string }>("/store/host");
  // Files go straight to the store host; the node asked only said where it is.
  const store = c.at(where.api_url);
  const total = files.reduce((s, f) => s + f.bytes, 0);
  try {
    for (const f of files) {
      if (!p.json) io.out(`sending ${f.rel} (${bytes(f.bytes)}) to ${where.name}`);
      await store.upload(
        `/store/uploads/${id}/files/${f.rel.split("/").map(encodeURIComponent).join("/")}`,
        f.abs,
        f.bytes,
      );
    }
    await store.json("POST", `/store/uploads/${id}/commit`);
  } catch (e) {
    await store.json("DELETE", `/store/uploads/${id}`).catch(() => undefined);
    throw e;
  }
  // The store watch registers it once its files have settled (a few seconds).
  const deadline = Date.now() + 60_000;
  let registered = false;
  while (!registered && Date.now() < deadline) {
    const s = await c.get<{ models: { model_id: string }[] }>("/state");
    registered = s.models.some((m) => m.model_id === id);
    if (!registered) await new Promise((r) => setTimeout(r, 500));
  }
  if (!registered)
    throw new ApiError(
      504,
      "not_registered",
      `${id} is in the store but not registered after 60 s: see the store host's log (ic logs)`,
    );
  const out = { model_id: id, files: files.length, bytes: total, store_host: where.name };
  if (p.values["place"]) {
    const placed = await c.json<{ instance: { instance_id: string } }>("POST", "/place_instance", {
      model_id: id,
      min_nodes: 1,
      excluded_nodes: [],
    });
    print(
      io,
      p,
      { ...out, instance_id: placed.instance.instance_id },
      () =>
        `imported ${id} (${files.length} file(s), ${bytes(total)}) and placed ${placed.instance.instance_id}`,
    );
    return 0;
  }
  print(
    io,
    p,
    out,
    () => `imported ${id} (${files.length} file(s), ${bytes(total)}): ic place ${id}`,
  );
  return 0;
}

async function verbPulls(p: Parsed, c: Client, io: Io): Promise<number> {
  const dismiss = p.values["dismiss"] as string | undefined;
  if (dismiss !== undefined) {
    const r = await c.json<{ pull: Pull; dismissed: boolean }>("DELETE", `/store/pulls/${dismiss}`);
    print(io, p, r, () =>
      r.dismissed
        ? `dismissed the ${r.pull.state} pull of ${dismiss}`
        : `the pull of ${dismiss} was ${r.pull.state === "cancelled" ? "live: cancelled it" : r.pull.state}`,
    );
    return 0;
  }
  const { pulls } = await c.get<{ pulls: Pull[] }>("/store/pulls");
  print(io, p, pulls, () =>
    pulls.length
      ? table(
          ["MODEL", "QUANT", "STATE", "PROGRESS"],
          pulls.map((x) => [
            x.model_id,
            x.quant ?? "-",
            x.state,
            x.error ? x.error.message : progressBar(x.bytes_done, x.bytes_total),
          ]),
        )
      : "no pulls",
  );
  return 0;
}

async function verbPlace(p: Parsed, c: Client, io: Io): Promise<number> {
  const sharding = (p.values["sharding"] as string | undefined) ?? "Pipeline";
  if (sharding !== "Pipeline" && sharding !== "Tensor")
    throw new UsageError(`--sharding must be Pipeline or Tensor, not "${sharding}"`);
  const body = {
    model_id: p.positionals[0],
    min_nodes: intOption("min-nodes", p.values["min-nodes"], 1, 1024, 1),
    sharding,
    excluded_nodes: ((p.values["exclude"] as string | undefined) ?? "").split(",").filter(Boolean),
    ...(p.values["embeddings"] ? { embeddings: true } : {}),
    replicas: intOption("replicas", p.values["replicas"], 1, 16, 1),
  };
  type Placed = {
    instance_id: string;
    assignments: { node_id: string; rank: number; layers: number }[];
  };
  const r = await c.json<{ instance: Placed; instances?: Placed[] }>(
    "POST",
    "/place_instance",
    body,
    60_000,
  );
  const named = p.json ? String : await nodeNamer(c);
  const all = r.instances ?? [r.instance];
  print(io, p, r, () =>
    all
      .map(
        (i) =>
          `placed ${i.instance_id}: ${i.assignments.map((a) => `rank ${a.rank} on ${named(a.node_id)}, ${a.layers} layers`).join("; ")}`,
      )
      .join("\n"),
  );
  if (p.values["wait"]) for (const i of all) await waitServing(c, i.instance_id, io, p);
  return 0;
}

async function verbPreviews(p: Parsed, c: Client, io: Io): Promise<number> {
  const q = new URLSearchParams({ model_id: p.positionals[0]! });
  if (p.values["exclude"]) q.set("excluded_node_ids", p.values["exclude"] as string);
  const r = await c.get<{
    previews: {
      sharding: string;
      nodes: number;
      ok: boolean;
      assignments?: { node_id: string; rank: number; required_bytes: number }[];
      error?: { code: string; message: string };
    }[];
  }>(`/instance/previews?${q.toString()}`);
  const named = p.json ? String : await nodeNamer(c);
  print(io, p, r, () =>
    table(
      ["SHARDING", "NODES", "RESULT"],
      r.previews.map((v) => [
        v.sharding,
        String(v.nodes),
        v.ok
          ? `ok: ${(v.assignments ?? []).map((a) => `${named(a.node_id)} ${bytes(a.required_bytes)}`).join(", ")}`
          : `${v.error?.code}: ${v.error?.message}`,
      ]),
    ),
  );
  return 0;
}

async function verbRm(p: Parsed, c: Client, io: Io): Promise<number> {
  const id = await instanceId(c, p.positionals[0]!);
  const r = await c.json<{ instance_id: string }>("DELETE", `/instance/${encodeURIComponent(id)}`);
  print(io, p, r, () => `deleted ${r.instance_id}`);
  return 0;
}

async function verbChat(p: Parsed, c: Client, io: Io): Promise<number> {
  const [model, ...words] = p.positionals;
  const content = words.join(" ") || "Hello!";
  const maxTokens = intOption("max-tokens", p.values["max-tokens"], 1, 1_000_000, 256);
  const t = p.values["temperature"] as string | undefined;
  const temperature = t === undefined ? undefined : Number(t);
  if (temperature !== undefined && !(temperature >= 0 && temperature <= 2))
    throw new UsageError(`--temperature must be a number from 0 to 2, not "${t}"`);
  const r = await c.raw(
    "POST",
    "/v1/chat/completions",
    {
      model,
      messages: [{ role: "user", content }],
      max_tokens: maxTokens,
      stream: true,
      ...(temperature === undefined ? {} : { temperature }),
    },
    900_000,
  );
  if (!r.ok) {
    throw await Client.errorOf(r);
  }
  const decoder = new TextDecoder();
  let buf = "";
  let text = "";
  for await (const chunk of r.body!) {
    buf += decoder.decode(chunk as Uint8Array, { stream: true });
    let at;
    while ((at = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, at);
      buf = buf.slice(at + 2);
      const data = ev
        .split("\n")
        .find((l) => l.startsWith("data: "))
        ?.slice(6);
      if (!data || data === "[DONE]") continue;
      const j = JSON.parse(data) as {
        error?: { code: string; message: string };
        choices?: { delta?: { content?: string } }[];
      };
      if (j.error) throw new ApiError(500, j.error.code, j.error.message);
      const piece = j.choices?.[0]?.delta?.content ?? "";
      text += piece;
      if (!p.json) io.write(piece);
    }
  }
  if (p.json) io.out(JSON.stringify({ model, content: text }, null, 2));
  else io.write("\n");
  return 0;
}

async function verbLogs(p: Parsed, c: Client, io: Io): Promise<number> {
  const tail = intOption("tail", p.values["tail"], 1, 5000, 50);
  if (p.values["instance"]) {
    if (p.values["follow"])
      throw new UsageError("-f follows a node's own log; a runner's log is read with --tail");
    const rank = intOption("rank", p.values["rank"], 0, 1024, 0);
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

async function verbStorage(p: Parsed, c: Client, io: Io): Promise<number> {
  // The node asks its live peers itself (GET /store/storage/cluster): their API addresses need
  // not be reachable from here.
  const s = await c.get<{
    nodes: {
      name: string;
      report: {
        staged_bytes: number;
        event_log_bytes: number;
        models_volume: { free_bytes: number; total_bytes: number };
        staged_models: unknown[];
      };
    }[];
    unreachable: { node: string; error: string }[];
  }>("/store/storage/cluster", 10_000);
  const only = p.values["node"] ? (await memberOf(c, p.values["node"] as string)).name : undefined;
  const reports = [
    ...s.nodes.map((n) => ({ node: n.name, ...n.report })),
    ...s.unreachable.map((u) => ({ node: u.node, error: u.error })),
  ].filter((r) => only === undefined || r.node === only);
  print(io, p, reports, () =>
    table(
      ["NODE", "STAGED", "MODELS", "EVENT LOG", "VOLUME FREE"],
      reports.map((r) =>
        "error" in r
          ? [r.node, "-", "-", "-", String(r.error)]
          : [
              r.node,
              bytes(r.staged_bytes),
              String(r.staged_models.length),
              bytes(r.event_log_bytes),
              `${bytes(r.models_volume.free_bytes)} / ${bytes(r.models_volume.total_bytes)}`,
            ],
      ),
    ),
  );
  return 0;
}

async function verbPurge(p: Parsed, c: Client, io: Io): Promise<number> {
  const model = p.values["model"] as string | undefined;
  const r = await c.json<PurgeAnswer & { ok: boolean }>(
    "POST",
    "/store/purge-staging",
    model ? { modelId: model } : {},
  );
  print(io, p, r, () => purgeText(r, model));
  return r.ok ? 0 : 1;
}

async function verbTraces(p: Parsed, c: Client, io: Io): Promise<number> {
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
  const limit = intOption("limit", p.values["limit"], 1, 1000, 20);
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

async function verbDoctor(p: Parsed, c: Client, io: Io): Promise<number> {
  const expectNodes =
    p.values["expect-nodes"] === undefined
      ? undefined
      : intOption("expect-nodes", p.values["expect-nodes"], 1, 10_000, 1);
  const checks = evaluate(await gather(c, { expectNodes }));
  print(io, p, checks, () =>
    checks.map((k) => `${k.ok ? "✓" : "✗"} ${k.name.padEnd(16)} ${k.detail}`).join("\n"),
  );
  return checks.every((k) => k.ok) ? 0 : 1;
}

/** What `run` calls for each verb of `ic` (args.ts's VERBS holds their options and help). */
export const RUNNERS: Readonly<Record<string, (p: Parsed, c: Client, io: Io) => Promise<number>>> =
  {
    start: verbStart,
    status: verbStatus,
    models: verbModels,
    pull: verbPull,
    import: verbImport,
    pulls: verbPulls,
    place: verbPlace,
    previews: verbPreviews,
    rm: verbRm,
    chat: verbChat,
    logs: verbLogs,
    storage: verbStorage,
    purge: verbPurge,
    traces: verbTraces,
    doctor: verbDoctor,
  };

export async function run(p: Parsed, c: Client, io: Io): Promise<number> {
  const verb = Object.hasOwn(RUNNERS, p.verb) ? RUNNERS[p.verb] : undefined;
  if (!verb) throw new UsageError(`unknown verb "${p.verb}"`);
  return verb(p, c, io);
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
