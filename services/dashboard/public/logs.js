// What happened, in three panels: the event log (the last events of GET /events, newest first,
// filtered by kind and by text, each row opening to the whole event), the traces (tracing on or
// off on this node, the cluster's recent traces, one trace's stats), and the logs (a runner's log
// from the node that runs it, this node's own log at a level and above, one line per pino line).
import { $, bytes, h, showError, syncSelect, table, when } from "./dom.js";
import { act, api } from "./api.js";
import { nodeName } from "./state.js";

// ---------------------------------------------------------------- event log

/** The family of an event type, for its colour: InstancePlaced -> instance, RunnerFailed -> runner. */
function eventKind(type) {
  const m = /^(Instance|Runner|Node|Deployment|Model|Task|Session|Master|Member)/.exec(type);
  return m ? m[1].toLowerCase() : "other";
}

/** Failures and losses stand out. */
function eventTone(type) {
  return /Failed|Lost|Left|Deleted|Deregistered|Refused/.test(type)
    ? "bad"
    : /Placed|Ready|Created|Registered|Joined|Started/.test(type)
      ? "ok"
      : "muted";
}

/** The fields of an event worth a glance, as key=value (the whole event is one click away). */
function eventSummary(ev) {
  const keys = [
    "model_id",
    "instance_id",
    "node_id",
    "name",
    "rank",
    "state",
    "cause",
    "reason",
    "status",
  ];
  const parts = [];
  const visit = (o) => {
    for (const [k, v] of Object.entries(o ?? {})) {
      if (v !== null && typeof v === "object" && !Array.isArray(v)) visit(v);
      else if (keys.includes(k) && parts.length < 6) {
        const text = k === "node_id" ? nodeName(String(v)) : String(v);
        parts.push(`${k.replace(/_id$/, "")}=${text.length > 80 ? `${text.slice(0, 80)}…` : text}`);
      }
    }
  };
  visit(ev);
  return parts.join("  ");
}

let eventRecords = [];

function renderEvents() {
  const kind = $("events-kind").value;
  const filter = $("events-filter").value.trim().toLowerCase();
  const kinds = [...new Set(eventRecords.map((e) => eventKind(e.type)))].sort();
  syncSelect($("events-kind"), [["", "every kind"], ...kinds.map((k) => [k, k])], true);
  const rows = [...eventRecords]
    .reverse()
    .filter((e) => !kind || eventKind(e.type) === kind)
    .filter((e) => !filter || JSON.stringify(e).toLowerCase().includes(filter))
    .map((e) => [
      String(e.seq),
      when(e.at),
      h("span", { class: `badge kind-${eventKind(e.type)} ${eventTone(e.type)}` }, e.type),
      h(
        "details",
        null,
        h("summary", { class: "mono" }, eventSummary(e.event) || "(details)"),
        h("pre", null, JSON.stringify(e.event, null, 2)),
      ),
    ]);
  table($("events-table"), ["seq", "at", "type", "event"], rows, "no events");
}

export async function refreshEvents() {
  try {
    const r = await api("GET", "/events?limit=100");
    $("events-mode").textContent = `log mode: ${r.mode}`;
    eventRecords = r.records;
    renderEvents();
  } catch (e) {
    $("events-mode").textContent = `event log: ${e.message}`;
  }
}

export function wireEvents() {
  $("events-kind").addEventListener("change", renderEvents);
  $("events-filter").addEventListener("input", renderEvents);
}

// ---------------------------------------------------------------- traces

export async function refreshTraces() {
  try {
    const [t, list] = await Promise.all([
      api("GET", "/v1/tracing"),
      api("GET", "/v1/traces/cluster?limit=20"),
    ]);
    $("tracing-enabled").checked = t.enabled;
    showError(
      "traces-error",
      list.unreachable.length > 0
        ? {
            message: `unreachable: ${list.unreachable.map((u) => `${u.node} (${u.error})`).join(", ")}`,
          }
        : null,
    );
    table(
      $("traces-table"),
      ["task", "model", "node", "created", ""],
      list.traces.map((x) => [
        h("code", null, x.taskId),
        x.modelId,
        x.node,
        when(x.createdAt),
        h("button", {
          type: "button",
          textContent: "stats",
          onclick: (ev) => act(ev.currentTarget, "traces-error", () => showStats(x.taskId)),
        }),
      ]),
      t.enabled ? "no traces yet" : "tracing is off on this node",
    );
  } catch (e) {
    showError("traces-error", e);
  }
}

/** @type {[string, (s: any) => unknown][]} */
const STAT_ROWS = [
  ["ok", (s) => (s.ok ? "yes" : `no (${s.error?.code ?? s.status})`)],
  ["total", (s) => ms(s.totalMs)],
  ["time to first token", (s) => ms(s.ttftMs)],
  ["queue", (s) => ms(s.queueMs)],
  ["prefill", (s) => ms(s.prefillMs)],
  ["decode", (s) => ms(s.decodeMs)],
  ["prompt tokens", (s) => s.promptTokens ?? "—"],
  ["completion tokens", (s) => s.completionTokens ?? "—"],
  ["tokens/s", (s) => (s.tokensPerSecond === null ? "—" : s.tokensPerSecond.toFixed(1))],
];

function ms(v) {
  return v === null || v === undefined ? "—" : `${v.toFixed(1)} ms`;
}

async function showStats(taskId) {
  const s = await api("GET", `/v1/traces/cluster/${encodeURIComponent(taskId)}/stats`);
  table(
    $("trace-stats"),
    [`${taskId} on ${s.foundOn}`, ""],
    STAT_ROWS.map(([k, f]) => [k, String(f(s))]),
    "",
  );
}

export function wireTraces() {
  $("traces-refresh").addEventListener("click", (ev) =>
    act(ev.currentTarget, "traces-error", refreshTraces),
  );
  $("tracing-enabled").addEventListener("change", (ev) =>
    act(ev.currentTarget, "traces-error", async () => {
      const r = await api("PUT", "/v1/tracing", { enabled: ev.currentTarget.checked });
      ev.currentTarget.checked = r.enabled;
    }),
  );
}

// ---------------------------------------------------------------- runner and node logs

const LEVEL_NAMES = { 10: "TRACE", 20: "DEBUG", 30: "INFO", 40: "WARN", 50: "ERROR", 60: "FATAL" };
/** @type {[string, string[]][]} */
const LOG_KEYS = [
  ["model", ["model", "model_id"]],
  ["instance", ["instance", "instance_id"]],
  ["rank", ["rank"]],
  ["code", ["code"]],
  ["error", ["error", "err", "last_error", "reason"]],
];

/** One pino line as one readable line: time, level, component, message, the key fields. */
function logLine(l) {
  if (typeof l.raw === "string" && l.msg === undefined) return l.raw;
  const time = typeof l.time === "number" ? new Date(l.time).toISOString() : (l.time ?? "-");
  const level = (LEVEL_NAMES[l.level] ?? String(l.level ?? "-")).padEnd(5);
  const keys = [];
  for (const [name, from] of LOG_KEYS) {
    const k = from.find((f) => l[f] !== undefined && l[f] !== null);
    if (k === undefined) continue;
    const v = l[k];
    const text = typeof v === "string" ? v : (v?.message ?? JSON.stringify(v));
    keys.push(`${name}=${String(text).replace(/\s*\n\s*/g, " ⏎ ")}`);
  }
  return [time, level, l.component ?? "-", l.msg ?? "", keys.join(" ")].join("  ").trimEnd();
}

export function wireLogs() {
  $("log-button").addEventListener("click", (ev) =>
    act(ev.currentTarget, "log-error", async () => {
      const v = $("log-runner").value;
      if (!v) throw new Error("no runner");
      const [id, rank] = v.split(" ");
      const r = await api(
        "GET",
        `/instances/${encodeURIComponent(id)}/logs?rank=${encodeURIComponent(rank)}&tail=200`,
      );
      $("log-meta").textContent =
        `${r.file} on ${r.node.name} · ${bytes(r.size_bytes)}${r.truncated ? " · last lines only" : ""}`;
      $("log-text").textContent = r.lines.join("\n");
      $("log-text").scrollTop = $("log-text").scrollHeight;
    }),
  );

  $("node-log-button").addEventListener("click", (ev) =>
    act(ev.currentTarget, "node-log-error", async () => {
      const q = new URLSearchParams({ tail: "200" });
      const level = $("node-log-level").value;
      if (level) q.set("level", level);
      const r = await api("GET", `/logs?${q}`);
      $("node-log-meta").textContent =
        `${r.node} · ${r.lines.length} line(s)${level ? ` at ${level} and above` : ""} · ${r.buffer.lines} kept in memory`;
      $("node-log-text").textContent = r.lines.map(logLine).join("\n") || "(no lines)";
      $("node-log-text").scrollTop = $("node-log-text").scrollHeight;
    }),
  );
}
