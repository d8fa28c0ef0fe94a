// The operator dashboard: plain DOM over this node's HTTP API, no build step. The cluster state
// arrives as Server-Sent Events from GET /state/stream (read with fetch, so the bearer token goes in
// a header); the other panels ask their endpoints. Every value is put in the page as text, never
// as markup, and the Content-Security-Policy allows scripts and styles from this origin only.
"use strict";

// Types for the checker only (npm test runs tsc over this file, tsconfig.public.json); the browser
// ignores them. The shapes are the API's own schemas, so a renamed field fails the typecheck.
/** @typedef {import("@ic/protocol").StateDocument} StateDocument */
/** @typedef {StateDocument["instances"][number]} InstanceView */
/** @typedef {InstanceView["assignments"][number]} AssignmentView */
/** @typedef {StateDocument["deployments"][number]} DeploymentView */
/** @typedef {import("@ic/protocol").ClusterStorage} ClusterStorage */

/** An element of index.html by id (any: the page's elements are inputs, dialogs and tables alike). */
const $ = (/** @type {string} */ id) => /** @type {any} */ (document.getElementById(id));
const TOKEN_KEY = "ic.dashboard.token";

let token = sessionStorage.getItem(TOKEN_KEY) ?? localStorage.getItem(TOKEN_KEY) ?? "";
/** The last state document, and node names by node id. */
/** @type {StateDocument | null} */
let state = null;
let names = new Map();

// ---------------------------------------------------------------- DOM and formatting helpers

/** An element with attributes (functions become listeners) and children (strings become text). */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (typeof v === "function") el.addEventListener(k.replace(/^on/, ""), v);
    else if (k === "class") el.className = v;
    else if (k in el && typeof el[k] !== "object") el[k] = v;
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** Replaces a table's rows: a header row and one row per item. */
function table(el, head, rows, empty) {
  el.replaceChildren(
    h(
      "thead",
      null,
      h(
        "tr",
        null,
        head.map((t) => h("th", null, t)),
      ),
    ),
    h(
      "tbody",
      null,
      rows.length > 0
        ? rows.map((cells) =>
            h(
              "tr",
              null,
              cells.map((c) => h("td", null, c)),
            ),
          )
        : h("tr", null, h("td", { colSpan: head.length, class: "muted" }, empty)),
    ),
  );
}

function bytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v >= 100 || u === 0 ? v.toFixed(0) : v.toFixed(1)} ${units[u]}`;
}

function ago(ms) {
  if (ms === null || ms === undefined || ms >= Number.MAX_SAFE_INTEGER) return "never";
  return ms < 1000
    ? `${ms} ms`
    : ms < 120_000
      ? `${(ms / 1000).toFixed(1)} s`
      : `${Math.round(ms / 60_000)} min`;
}

function when(t) {
  if (t === null || t === undefined) return "—";
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? String(t) : d.toLocaleTimeString();
}

function bar(done, total, label) {
  if (total === null || total === undefined || total <= 0)
    return h("span", { class: "muted" }, label ?? "—");
  const pct = Math.min(100, Math.round((100 * done) / total));
  return h(
    "span",
    { class: "progress", title: `${bytes(done)} of ${bytes(total)}` },
    h("progress", { max: total, value: Math.min(done, total) }),
    ` ${pct}% ${label ?? ""}`,
  );
}

function badge(text, kind) {
  return h("span", { class: `badge ${kind}` }, text);
}

const nodeName = (id) => names.get(id) ?? id;

/** A link only for http(s) URLs (a member's api_url comes from its heartbeat). */
function safeLink(url, text) {
  try {
    const u = new URL(url);
    if (u.protocol === "http:" || u.protocol === "https:") return h("a", { href: u.href }, text);
  } catch {
    /* not a URL */
  }
  return text;
}

function showError(id, e) {
  $(id).textContent = e ? (e.code ? `${e.code}: ${e.message}` : String(e.message ?? e)) : "";
}

// ---------------------------------------------------------------- API

/**
 * Reads a text/event-stream answer to its end, calling `onEvent(event, data)` for each event that
 * has data (the data lines joined; the event name "message" when none is given).
 */
async function readSse(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length > 0) onEvent(event, data.join("\n"));
    }
  }
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function authHeaders() {
  return token ? { authorization: `Bearer ${token}` } : {};
}

async function api(method, path, body) {
  const res = await fetch(path, {
    method,
    headers: {
      ...authHeaders(),
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try {
    data = await res.json();
  } catch {
    data = null;
  }
  if (!res.ok) {
    if (res.status === 401) askToken(data?.error?.message ?? "a token is required");
    const err = data?.error ?? {};
    throw new ApiError(
      res.status,
      err.code ?? `http_${res.status}`,
      err.message ?? `HTTP ${res.status}`,
    );
  }
  return data;
}

/** Runs a button's action with the button disabled; errors go to the panel's error line. */
async function act(button, errorId, fn) {
  button.disabled = true;
  showError(errorId, null);
  try {
    await fn();
  } catch (e) {
    showError(errorId, e);
  } finally {
    button.disabled = false;
  }
}

// ---------------------------------------------------------------- token

function askToken(why) {
  $("token-why").textContent =
    `${why}. Paste a token with the read scope to watch, and admin to change things.`;
  if (!$("token-dialog").open) $("token-dialog").showModal();
}

$("token-open").addEventListener("click", () => $("token-dialog").showModal());
$("token-cancel").addEventListener("click", () => $("token-dialog").close());
$("token-clear").addEventListener("click", () => {
  token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  localStorage.removeItem(TOKEN_KEY);
  $("token-dialog").close();
  restartStream();
});
$("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("token-input").value.trim();
  $("token-input").value = "";
  sessionStorage.setItem(TOKEN_KEY, token);
  if ($("token-remember").checked) localStorage.setItem(TOKEN_KEY, token);
  else localStorage.removeItem(TOKEN_KEY);
  $("token-dialog").close();
  restartStream();
  refreshAll();
});

// ---------------------------------------------------------------- live state (SSE over fetch)

let streamAbort = null;

function setLive(text, kind) {
  $("live").textContent = text;
  $("live").className = `badge ${kind}`;
}

function restartStream() {
  streamAbort?.abort();
  void stream();
}

async function stream() {
  const abort = new AbortController();
  streamAbort = abort;
  let backoff = 500;
  while (!abort.signal.aborted) {
    try {
      const res = await fetch("/state/stream", { headers: authHeaders(), signal: abort.signal });
      if (res.status === 401) {
        setLive("token needed", "bad");
        askToken((await res.json()).error?.message ?? "a token is required");
        return; // the token form restarts the stream
      }
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      setLive("live", "ok");
      backoff = 500;
      await readSse(res, (event, data) => {
        if (event === "state") render(JSON.parse(data));
      });
    } catch (e) {
      if (abort.signal.aborted) return;
      console.warn("state stream", e);
    }
    setLive("reconnecting", "warn");
    await new Promise((r) => setTimeout(r, backoff));
    backoff = Math.min(backoff * 2, 10_000);
  }
}

// ---------------------------------------------------------------- rendering the state document

function render(/** @type {StateDocument} */ doc) {
  const changed =
    state === null ||
    state.index !== doc.index ||
    state.session?.session_id !== doc.session?.session_id;
  state = doc;
  names = new Map(doc.node_identities.map((n) => [n.node_id, n.name]));
  $("node-name").textContent =
    `node ${doc.this_node.name}${doc.this_node.is_master ? " (master)" : ""}`;
  $("session").textContent = doc.session
    ? `session ${doc.session.session_id} · ${doc.node_identities.length} node(s) · index ${doc.index}`
    : "no session";
  const why = !doc.session
    ? "No cluster session yet: this node is electing a master or waiting for its peers."
    : !doc.this_node.synced
      ? "This node is catching up with the master; what it shows may be behind."
      : "";
  $("banner").hidden = why === "";
  $("banner").textContent = why;
  renderTopology(doc);
  renderHealth(doc);
  renderInstances(doc);
  renderModels(doc);
  renderPulls(doc);
  renderSelectors(doc);
  if (changed) scheduleFollowUps();
}

function renderTopology(/** @type {StateDocument} */ doc) {
  const telemetry = new Map(doc.topology.nodes.map((n) => [n.node_id, n]));
  table(
    $("nodes-table"),
    [
      "node",
      "role",
      "host",
      "last heard",
      "memory free",
      "GPUs",
      "disk free",
      "engine",
      "loop p99",
    ],
    doc.node_identities.map((m) => {
      const t = telemetry.get(m.node_id);
      const tel = t?.telemetry;
      const stale = !t || t.last_heard_ms_ago > 6000;
      return [
        safeLink(`${m.api_url}/`, m.name),
        m.is_master ? badge("master", "ok") : "follower",
        m.host,
        stale ? badge(ago(t?.last_heard_ms_ago), "bad") : ago(t.last_heard_ms_ago),
        tel
          ? bar(
              tel.memory_total_bytes - tel.memory_free_bytes,
              tel.memory_total_bytes,
              `used, ${bytes(tel.memory_free_bytes)} free`,
            )
          : "—",
        tel && tel.gpus.length > 0
          ? tel.gpus.map((g) =>
              h(
                "div",
                null,
                `${g.vendor} ${g.model}: ${bytes(g.vram_free_bytes)} free of ${bytes(g.vram_total_bytes)}`,
              ),
            )
          : "none",
        tel ? bytes(tel.disk_free_bytes) : "—",
        tel
          ? [
              tel.engine.backend,
              " ",
              tel.engine.usable ? badge("usable", "ok") : badge("unusable", "bad"),
            ]
          : "—",
        t?.loop_delay ? `${t.loop_delay.p99_ms.toFixed(1)} ms` : "—",
      ];
    }),
    "no members",
  );
  const ids = doc.node_identities.map((m) => m.node_id);
  const rtt = new Map(doc.topology.links.map((l) => [`${l.from} ${l.to}`, l.rtt_ms]));
  table(
    $("links-table"),
    ["from \\ to", ...ids.map(nodeName)],
    ids.length > 1
      ? ids.map((from) => [
          nodeName(from),
          ...ids.map((to) => {
            if (from === to) return "·";
            const v = rtt.get(`${from} ${to}`);
            return v === undefined ? badge("no link", "warn") : v.toFixed(2);
          }),
        ])
      : [],
    "one node: no links",
  );
}

function renderHealth(/** @type {StateDocument} */ doc) {
  const list = $("health-list");
  if (doc.nodeHealth.length === 0) {
    list.replaceChildren(h("p", { class: "ok-text" }, "every node is healthy"));
    return;
  }
  list.replaceChildren(
    ...doc.nodeHealth.map((e) =>
      h(
        "div",
        { class: `health ${e.severity}` },
        h(
          "div",
          null,
          badge(e.severity, e.severity === "error" ? "bad" : "warn"),
          " ",
          h("strong", null, e.node_name),
          " ",
          h("code", null, e.code),
        ),
        h("div", null, e.message),
        e.remediation ? h("div", { class: "remedy" }, "fix: ", e.remediation) : null,
      ),
    ),
  );
}

const RUNNER_KIND = {
  RunnerReady: "ok",
  RunnerStaging: "warn",
  RunnerWarmingUp: "warn",
  RunnerFailed: "bad",
  RunnerStopped: "muted",
};

function runnerCell(/** @type {InstanceView} */ inst, /** @type {AssignmentView} */ a) {
  const r = inst.runners.find((x) => x.rank === a.rank);
  const layers = a.layers === undefined ? "" : ` (${a.layers} layers)`;
  const head = [`rank ${a.rank} on ${nodeName(a.node_id)}${layers} `];
  if (!r) return h("div", null, head, badge("no report yet", "muted"));
  const extra = [];
  if (r.state === "RunnerStaging" && r.progress)
    extra.push(" ", bar(r.progress.staged_bytes, r.progress.total_bytes, "staged"));
  if (r.state === "RunnerWarmingUp" && r.warmup_started_at)
    extra.push(` warming up since ${when(r.warmup_started_at)}`);
  if (r.restarts > 0) extra.push(` · ${r.restarts} restart(s)`);
  if (r.reason) extra.push(h("div", { class: "error" }, r.reason));
  if (r.last_error && r.last_error !== r.reason)
    extra.push(h("div", { class: "error" }, r.last_error));
  return h(
    "div",
    null,
    head,
    badge(r.state.replace(/^Runner/, ""), RUNNER_KIND[r.state] ?? "muted"),
    extra,
  );
}

function renderInstances(/** @type {StateDocument} */ doc) {
  table(
    $("instances-table"),
    ["instance", "model", "sharding", "runners", ""],
    doc.instances.map((inst) => [
      h("code", null, inst.instance_id),
      inst.model_id,
      inst.sharding,
      inst.assignments.map((a) => runnerCell(inst, a)),
      h("button", {
        type: "button",
        class: "danger",
        textContent: "delete",
        "data-instance": inst.instance_id,
        onclick: (ev) =>
          act(ev.currentTarget, "place-error", async () => {
            if (!confirm(`Delete instance ${inst.instance_id} (${inst.model_id})?`)) return;
            await api("DELETE", `/instance/${encodeURIComponent(inst.instance_id)}`);
          }),
      }),
    ]),
    "no instances: place a model below",
  );
  table(
    $("deployments-table"),
    ["deployment", "model", "nodes", "status"],
    doc.deployments.map((d) => {
      // Replicas of one placement: how many the set has, kept on distinct nodes.
      const set = d.replica_set
        ? doc.deployments.filter((x) => x.replica_set === d.replica_set).length
        : 0;
      return [
        h("code", null, d.deployment_id),
        d.model_id,
        [
          `${d.min_nodes}+ ${d.sharding}`,
          set > 0
            ? h(
                "div",
                { class: "muted", title: d.replica_set },
                `replica of ${set}, distinct nodes`,
              )
            : null,
        ],
        deploymentStatus(d),
      ];
    }),
    "no deployments",
  );
}

const DEPLOYMENT_KIND = { Placed: "ok", Pending: "warn", Failing: "bad", Failed: "bad" };

/** A deployment's badge, then why: the refusal, or where its instance failed and the engine's words. */
function deploymentStatus(/** @type {DeploymentView} */ d) {
  const out = [badge(d.status.toLowerCase(), DEPLOYMENT_KIND[d.status] ?? "muted")];
  if (d.instance_id && d.status !== "Failed") out.push(" ", h("code", null, d.instance_id));
  if (d.status === "Failed") {
    out.push(
      h(
        "div",
        { class: "error" },
        "given up: it failed on every node tried; fix or replace the model and place it again",
      ),
    );
  } else if (d.status === "Failing") {
    out.push(h("div", { class: "error" }, "failed; being placed on another node"));
  }
  for (const f of d.failures ?? [])
    out.push(h("div", { class: "error" }, `${f.node_name} (${when(f.at)}): ${f.error}`));
  if (d.refusal) out.push(h("div", { class: "error" }, `${d.refusal.code}: ${d.refusal.message}`));
  return out;
}

function readyModels(/** @type {StateDocument} */ doc) {
  const ready = new Set();
  for (const inst of doc.instances) {
    const r0 = inst.runners.find((r) => r.rank === 0);
    if (r0 && r0.state === "RunnerReady" && r0.endpoint) ready.add(inst.model_id);
  }
  return ready;
}

/** Ready, failing or failed (its deployment says so), starting, or not placed. */
function servingBadge(/** @type {StateDocument} */ doc, ready, modelId) {
  if (ready.has(modelId)) return badge("ready", "ok");
  const d = doc.deployments.find((x) => x.model_id === modelId);
  if (d && (d.status === "Failed" || d.status === "Failing"))
    return badge(d.status.toLowerCase(), "bad");
  if (d && d.status === "Pending") return badge("pending", "warn");
  if (d || doc.instances.some((i) => i.model_id === modelId)) return badge("starting", "warn");
  return badge("not placed", "muted");
}

function renderModels(/** @type {StateDocument} */ doc) {
  const ready = readyModels(doc);
  table(
    $("models-table"),
    ["model", "size", "architecture", "layers", "serving", ""],
    doc.models.map((m) => [
      h("code", null, m.model_id),
      bytes(m.bytes),
      m.architecture ?? "—",
      m.layers ?? "—",
      servingBadge(doc, ready, m.model_id),
      h("button", {
        type: "button",
        class: "danger",
        textContent: "remove from store",
        onclick: (ev) =>
          act(ev.currentTarget, "pull-error", async () => {
            if (!confirm(`Remove ${m.model_id} from the store? Its files are deleted.`)) return;
            await api(
              "DELETE",
              `/store/models/${m.model_id.split("/").map(encodeURIComponent).join("/")}`,
            );
          }),
      }),
    ]),
    "no models registered: pull one below or copy one into store_path",
  );
}

const PULL_KIND = {
  queued: "muted",
  running: "warn",
  done: "ok",
  failed: "bad",
  cancelled: "muted",
};

function renderPulls(/** @type {StateDocument} */ doc) {
  table(
    $("pulls-table"),
    ["pull", "state", "progress", "files", ""],
    doc.pulls.map((p) => {
      const path = `/store/pulls/${p.model_id.split("/").map(encodeURIComponent).join("/")}`;
      const live = p.state === "queued" || p.state === "running";
      const again = p.state === "cancelled" || p.state === "failed";
      const dismiss = h("button", {
        type: "button",
        textContent: "dismiss",
        title: "take it off the list (partial files stay for a later pull)",
        onclick: (ev) => act(ev.currentTarget, "pull-error", () => api("DELETE", path)),
      });
      return [
        [
          h("code", null, p.model_id),
          h(
            "div",
            { class: "muted" },
            [p.quant, p.revision, p.served_file].filter(Boolean).join(" · "),
          ),
        ],
        [
          badge(p.state, PULL_KIND[p.state] ?? "muted"),
          p.error ? h("div", { class: "error" }, `${p.error.code}: ${p.error.message}`) : null,
        ],
        bar(p.bytes_done, p.bytes_total, bytes(p.bytes_done)),
        p.files_total === null ? "—" : `${p.files_done} / ${p.files_total}`,
        live
          ? h("button", {
              type: "button",
              textContent: "cancel",
              onclick: (ev) => act(ev.currentTarget, "pull-error", () => api("DELETE", path)),
            })
          : again
            ? h("span", null, [
                h("button", {
                  type: "button",
                  textContent: "resume",
                  onclick: (ev) =>
                    act(ev.currentTarget, "pull-error", () =>
                      api("POST", "/store/pulls", {
                        model_id: p.model_id,
                        revision: p.revision,
                        ...(p.quant ? { quant: p.quant } : {}),
                      }),
                    ),
                }),
                " ",
                dismiss,
              ])
            : dismiss,
      ];
    }),
    "no pulls",
  );
}

/** Keeps a select's options in step with `items` ([value, label]) without losing the selection. */
function syncSelect(el, items, keepEmpty) {
  const selected = new Set([...el.selectedOptions].map((o) => o.value));
  const same =
    el.options.length === items.length &&
    items.every(([v, l], i) => el.options[i].value === v && el.options[i].text === l);
  if (same) return;
  el.replaceChildren(
    ...items.map(([v, l]) => h("option", { value: v, selected: selected.has(v) }, l)),
  );
  if (!keepEmpty && el.selectedIndex < 0 && el.options.length > 0 && !el.multiple)
    el.selectedIndex = 0;
}

function renderSelectors(/** @type {StateDocument} */ doc) {
  syncSelect(
    $("place-model"),
    doc.models.map((m) => [m.model_id, m.model_id]),
  );
  syncSelect(
    $("place-exclude"),
    doc.node_identities.map((m) => [m.node_id, m.name]),
    true,
  );
  syncSelect(
    $("log-runner"),
    doc.instances.flatMap((i) =>
      i.assignments.map((a) => [
        `${i.instance_id} ${a.rank}`,
        `${i.model_id} · rank ${a.rank} on ${nodeName(a.node_id)} · ${i.instance_id}`,
      ]),
    ),
  );
}

// ---------------------------------------------------------------- placement previews

$("preview-button").addEventListener("click", (ev) =>
  act(ev.currentTarget, "place-error", async () => {
    const model = $("place-model").value;
    if (!model) throw new Error("no model registered");
    const excluded = [...$("place-exclude").selectedOptions].map((o) => o.value);
    const q = new URLSearchParams({ model_id: model });
    if (excluded.length > 0) q.set("excluded_node_ids", excluded.join(","));
    const p = await api("GET", `/instance/previews?${q}`);
    table(
      $("previews-table"),
      ["sharding", "nodes", "placement or refusal", ""],
      p.previews.map((v) => [
        v.sharding,
        String(v.nodes),
        v.ok
          ? v.assignments.map((a) =>
              h(
                "div",
                null,
                `${nodeName(a.node_id)}: rank ${a.rank}${a.layers === undefined ? "" : `, ${a.layers} layers`}, needs ${bytes(a.required_bytes)}`,
              ),
            )
          : h("div", { class: "error" }, `${v.error.code}: ${v.error.message}`),
        h("button", {
          type: "button",
          textContent: "place",
          disabled: !v.ok,
          "data-preview": `${v.sharding}-${v.nodes}`,
          onclick: (e2) =>
            act(e2.currentTarget, "place-error", async () => {
              const r = await api("POST", "/place_instance", {
                model_id: model,
                min_nodes: v.nodes,
                sharding: v.sharding,
                excluded_nodes: excluded,
              });
              $("place-error").textContent = "";
              e2.target.replaceWith(badge(`placed ${r.instance.instance_id}`, "ok"));
            }),
        }),
      ]),
      "no previews",
    );
    // The memory each node offers placement, and why a node takes no instances.
    table(
      $("preview-nodes"),
      ["node", "free for placement", "reserved by instances", "candidate"],
      p.nodes.map((n) => [
        n.name,
        n.free_bytes === null
          ? "not heard yet"
          : `${bytes(n.free_bytes)} of ${bytes(n.total_bytes)}`,
        bytes(n.reserved_bytes),
        n.candidate
          ? badge("yes", "ok")
          : [
              badge("no", "bad"),
              n.unavailable
                ? h(
                    "div",
                    { class: "error" },
                    `${n.unavailable.health_code}: ${n.unavailable.message}`,
                  )
                : null,
            ],
      ]),
      "no nodes",
    );
  }),
);

// ---------------------------------------------------------------- pulls

$("pull-button").addEventListener("click", (ev) =>
  act(ev.currentTarget, "pull-error", async () => {
    // org/repo[:QUANT], as ic pull takes it.
    const [model, quant] = $("pull-model").value.trim().split(":");
    const revision = $("pull-revision").value.trim();
    await api("POST", "/store/pulls", {
      model_id: model,
      ...(quant ? { quant } : {}),
      ...(revision ? { revision } : {}),
    });
    $("pull-model").value = "";
    $("pull-revision").value = "";
  }),
);

// ---------------------------------------------------------------- storage and purge

async function refreshStorage() {
  try {
    const s = /** @type {ClusterStorage} */ (await api("GET", "/store/storage/cluster"));
    showError("storage-error", null);
    const rows = [];
    for (const n of s.nodes) {
      const r = n.report;
      const v = r.models_volume;
      rows.push([
        h("strong", null, n.name),
        bar(v.total_bytes - v.free_bytes, v.total_bytes, `used, ${bytes(v.free_bytes)} free`),
        bytes(r.staged_bytes),
        r.staged_models.length === 0
          ? h("span", { class: "muted" }, "nothing staged")
          : r.staged_models.map((m) =>
              h(
                "div",
                { class: "staged" },
                h("code", null, m.model_id),
                ` ${bytes(m.size_bytes)} `,
                m.in_use ? badge("in use", "ok") : badge("idle", "muted"),
                m.downloading ? badge("downloading", "warn") : null,
                m.in_use
                  ? null
                  : h("button", {
                      type: "button",
                      textContent: "purge",
                      title: `purge ${m.model_id} on every node`,
                      onclick: (ev) =>
                        act(ev.currentTarget, "storage-error", () => purge(m.model_id)),
                    }),
              ),
            ),
        `${bytes(r.event_log_bytes)} events`,
        `keep ${bytes(r.staging.staging_keep_recent_bytes)}, headroom ${bytes(r.staging.headroom_bytes)}, cleanup ${r.staging.cleanup_on_deactivate ? "on" : "off"}`,
      ]);
    }
    for (const u of s.unreachable)
      rows.push([h("strong", null, u.node), badge("unreachable", "bad"), u.error, "", ""]);
    table(
      $("storage-table"),
      ["node", "models volume", "staged", "staged models", "event log", "staging settings"],
      rows,
      "no nodes",
    );
  } catch (e) {
    showError("storage-error", e);
  }
}

async function purge(modelId) {
  const r = await api("POST", "/store/purge-staging", modelId ? { modelId } : {});
  $("purge-result").textContent =
    `freed ${bytes(r.deleted_bytes)} on ${r.nodes.length} node(s)` +
    (r.not_answered.length > 0 ? `; no answer from ${r.not_answered.join(", ")}` : "");
  await refreshStorage();
}

$("storage-refresh").addEventListener("click", (ev) =>
  act(ev.currentTarget, "storage-error", refreshStorage),
);
$("purge-all").addEventListener("click", (ev) =>
  act(ev.currentTarget, "storage-error", async () => {
    if (!confirm("Purge every staged copy that is not in use, on every node?")) return;
    await purge(null);
  }),
);

// ---------------------------------------------------------------- settings editor

const SETTING_KEYS = ["cleanup_on_deactivate", "staging_keep_recent_gb", "headroom_gb"];

function fillSettings(v) {
  $("settings-file").textContent = v.file
    ? `${v.file} on ${v.node}${v.writable ? "" : ` (read only: ${v.read_only_reason})`}`
    : `${v.node}: ${v.read_only_reason}`;
  for (const k of SETTING_KEYS) {
    const base = v.staging[k];
    const over = v.node_override[k];
    $(`set-base-${k}`).value = String(base);
    $(`set-node-${k}`).value = over === undefined ? "" : String(over);
    $(`applied-${k}`).textContent =
      String(v.applied[k]) + (v.applied[k] !== v.effective[k] ? ` (file: ${v.effective[k]})` : "");
  }
  $("settings-save").disabled = !v.writable;
}

/** A field as the value to send: booleans and numbers as such, anything else as typed (the server checks). */
function fieldValue(k, raw) {
  if (k === "cleanup_on_deactivate") return raw === "true" ? true : raw === "false" ? false : raw;
  const n = Number(raw);
  return raw.trim() !== "" && Number.isFinite(n) ? n : raw;
}

async function loadSettings() {
  try {
    fillSettings(await api("GET", "/admin/settings"));
    showError("settings-error", null);
  } catch (e) {
    showError("settings-error", e);
  }
}

$("settings-reload").addEventListener("click", () => void loadSettings());
$("settings-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  void act($("settings-save"), "settings-error", async () => {
    const staging = {};
    const node_override = {};
    for (const k of SETTING_KEYS) {
      staging[k] = fieldValue(k, $(`set-base-${k}`).value);
      const o = $(`set-node-${k}`).value;
      node_override[k] = o.trim() === "" ? null : fieldValue(k, o);
    }
    const v = await api("PUT", "/admin/settings", { staging, node_override });
    fillSettings(v);
    $("settings-message").textContent =
      `saved to ${v.file} and applied at ${new Date().toLocaleTimeString()}`;
    await refreshStorage();
  });
});

// ---------------------------------------------------------------- event log

let followTimer = null;
let followAt = 0;

/** After a change of the replica: the event log and storage again, at most once a second. */
function scheduleFollowUps() {
  if (followTimer) return;
  const wait = Math.max(0, followAt + 1000 - Date.now());
  followTimer = setTimeout(() => {
    followTimer = null;
    followAt = Date.now();
    void refreshEvents();
    void refreshStorage();
  }, wait);
}

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
  const keys = ["model_id", "instance_id", "node_id", "name", "rank", "state", "reason", "status"];
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

async function refreshEvents() {
  try {
    const r = await api("GET", "/events?limit=100");
    $("events-mode").textContent = `log mode: ${r.mode}`;
    eventRecords = r.records;
    renderEvents();
  } catch (e) {
    $("events-mode").textContent = `event log: ${e.message}`;
  }
}

$("events-kind").addEventListener("change", renderEvents);
$("events-filter").addEventListener("input", renderEvents);

// ---------------------------------------------------------------- charts

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs ?? {})) el.setAttribute(k, String(v));
  for (const c of children) if (c) el.append(c);
  return el;
}

/**
 * A line chart of `series` ([{ name, points: [[t, v]] }]) over the last hour, drawn as SVG (no
 * library): one polyline per series, the largest value and the time span on the axes, a legend.
 */
function lineChart(el, series, format) {
  const W = 600;
  const H = 170;
  const P = { l: 48, r: 8, t: 8, b: 20 };
  const now = Date.now();
  const from = now - 3600_000;
  const max = Math.max(0, ...series.flatMap((s) => s.points.map((p) => p[1])));
  const top = max > 0 ? max * 1.1 : 1;
  const x = (t) => P.l + ((t - from) / 3600_000) * (W - P.l - P.r);
  const y = (v) => H - P.b - (v / top) * (H - P.t - P.b);
  const chart = svg(
    "svg",
    { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": el.id },
    svg("line", { x1: P.l, y1: H - P.b, x2: W - P.r, y2: H - P.b, class: "axis" }),
    svg("line", { x1: P.l, y1: P.t, x2: P.l, y2: H - P.b, class: "axis" }),
  );
  const label = (x0, y0, text, anchor) => {
    const t = svg("text", { x: x0, y: y0, "text-anchor": anchor, class: "tick" });
    t.textContent = text;
    return t;
  };
  chart.append(
    label(P.l - 4, P.t + 10, format(top), "end"),
    label(P.l - 4, H - P.b, "0", "end"),
    label(P.l, H - 4, "−60 min", "start"),
    label(W - P.r, H - 4, "now", "end"),
  );
  series.forEach((s, i) => {
    const pts = s.points.filter((p) => p[0] >= from);
    if (pts.length === 0) return;
    chart.append(
      svg("polyline", {
        points: pts.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" "),
        class: `series s${i % 6}`,
      }),
    );
  });
  const legend = h(
    "div",
    { class: "legend" },
    series.map((s, i) => {
      const last = s.points.at(-1);
      return h(
        "span",
        null,
        h("i", { class: `swatch s${i % 6}` }),
        `${s.name}${last ? ` ${format(last[1])}` : ""}`,
      );
    }),
  );
  el.replaceChildren(chart, legend);
  // For tests and curious operators: how much the chart holds.
  el.dataset.points = String(series.reduce((n, s) => n + s.points.length, 0));
  el.dataset.max = String(max);
}

const perSecond = (v) => `${v >= 10 ? v.toFixed(0) : v.toFixed(2)}/s`;
const msText = (v) => `${v.toFixed(0)} ms`;
const gib = (v) => bytes(v);

async function refreshCharts() {
  try {
    const r = await api("GET", "/v1/diagnostics/series?scope=cluster");
    const step = r.interval_ms;
    const bucket = (t) => Math.round(t / step) * step;
    // Each gateway counts what it served: the cluster's rates are the sums per interval.
    const sums = new Map();
    for (const n of r.nodes)
      for (const s of n.samples) {
        const b = bucket(s.t);
        const a = sums.get(b) ?? { ok: 0, c4: 0, c5: 0, tok: 0, p50w: 0, w: 0, p95: null };
        a.ok += s.requests.ok;
        a.c4 += s.requests.client_error;
        a.c5 += s.requests.server_error;
        a.tok += s.tokens_per_s;
        if (s.ttft_p50_ms !== null) {
          a.p50w += s.ttft_p50_ms * s.requests.ok;
          a.w += s.requests.ok;
        }
        if (s.ttft_p95_ms !== null) a.p95 = Math.max(a.p95 ?? 0, s.ttft_p95_ms);
        sums.set(b, a);
      }
    const times = [...sums.keys()].sort((a, b) => a - b);
    const sec = step / 1000;
    const pick = (f) => times.map((t) => [t, f(sums.get(t))]);
    lineChart(
      $("chart-requests"),
      [
        { name: "2xx/3xx", points: pick((a) => a.ok / sec) },
        { name: "4xx", points: pick((a) => a.c4 / sec) },
        { name: "5xx", points: pick((a) => a.c5 / sec) },
      ],
      perSecond,
    );
    lineChart($("chart-tokens"), [{ name: "cluster", points: pick((a) => a.tok) }], perSecond);
    lineChart(
      $("chart-ttft"),
      [
        {
          name: "p50 (mean over gateways)",
          points: times
            .filter((t) => sums.get(t).w > 0)
            .map((t) => [t, sums.get(t).p50w / sums.get(t).w]),
        },
        {
          name: "p95 (worst gateway)",
          points: times.filter((t) => sums.get(t).p95 !== null).map((t) => [t, sums.get(t).p95]),
        },
      ],
      msText,
    );
    // Memory: this node's samples hold every node's, from the heartbeats.
    const own = r.nodes[0]?.samples ?? [];
    const byNode = new Map();
    for (const s of own)
      for (const m of s.memory) {
        const pts = byNode.get(m.node) ?? [];
        pts.push([s.t, m.used_bytes]);
        byNode.set(m.node, pts);
      }
    lineChart(
      $("chart-memory"),
      [...byNode].map(([name, points]) => ({ name, points })),
      gib,
    );
    $("charts-meta").textContent =
      `· a sample every ${sec} s from ${r.nodes.length} node(s)` +
      (r.unreachable.length
        ? ` · unreachable: ${r.unreachable.map((u) => u.node).join(", ")}`
        : "");
    showError("charts-error", null);
    return step;
  } catch (e) {
    showError("charts-error", e);
    return 10_000;
  }
}

async function chartLoop() {
  const step = await refreshCharts();
  setTimeout(
    () => {
      if (document.visibilityState === "visible") void chartLoop();
      else document.addEventListener("visibilitychange", () => void chartLoop(), { once: true });
    },
    Math.max(1000, step),
  );
}

// ---------------------------------------------------------------- playground

let playAbort = null;

async function refreshPlayModels() {
  try {
    const r = await api("GET", "/v1/models");
    syncSelect(
      $("play-model"),
      r.data.map((m) => [m.id, m.id]),
      false,
    );
    if (r.data.length === 0) showError("play-error", { message: "no model is ready yet" });
    else if ($("play-error").textContent === "no model is ready yet") showError("play-error", null);
    renderSnippets();
  } catch (e) {
    showError("play-error", e);
  }
}

function renderSnippets() {
  const model = $("play-model").value || "org/name";
  const base = location.origin;
  const content = $("play-prompt").value.trim() || "Hello!";
  const body = JSON.stringify({
    model,
    messages: [{ role: "user", content }],
    max_tokens: 256,
  });
  $("snippet-curl").textContent =
    `curl -s ${base}/v1/chat/completions \\\n` +
    `  -H "authorization: Bearer $IC_TOKEN" -H 'content-type: application/json' \\\n` +
    `  -d '${body.replaceAll("'", "'\\''")}'`;
  $("snippet-python").textContent = [
    "from openai import OpenAI  # pip install openai",
    "import os",
    "",
    `client = OpenAI(base_url="${base}/v1", api_key=os.environ["IC_TOKEN"])`,
    "stream = client.chat.completions.create(",
    `    model=${JSON.stringify(model)},`,
    `    messages=[{"role": "user", "content": ${JSON.stringify(content)}}],`,
    "    max_tokens=256,",
    "    stream=True,",
    ")",
    "for chunk in stream:",
    '    print(chunk.choices[0].delta.content or "", end="", flush=True)',
  ].join("\n");
}

/** Streams one answer into the playground, chunk by chunk (the SSE the API sends). */
async function playSend() {
  const model = $("play-model").value;
  if (!model) throw new Error("no model is ready yet");
  playAbort = new AbortController();
  $("play-stop").disabled = false;
  $("play-output").textContent = "";
  $("play-meta").textContent = "";
  const started = performance.now();
  /** @type {number | null} */
  let first = null;
  let tokens = 0;
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: { ...authHeaders(), "content-type": "application/json" },
      body: JSON.stringify({
        model,
        messages: [{ role: "user", content: $("play-prompt").value }],
        max_tokens: 256,
        stream: true,
      }),
      signal: playAbort.signal,
    });
    if (!res.ok) {
      const e = (await res.json().catch(() => ({}))).error ?? {};
      throw new ApiError(res.status, e.code ?? `http_${res.status}`, e.message ?? res.statusText);
    }
    await readSse(res, (_event, data) => {
      if (data === "[DONE]") return;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new ApiError(0, chunk.error.code, chunk.error.message);
      const text = chunk.choices?.[0]?.delta?.content ?? "";
      if (text) {
        first ??= performance.now();
        tokens++;
        $("play-output").append(text);
      }
    });
    const total = (performance.now() - started) / 1000;
    $("play-meta").textContent =
      `${tokens} chunk(s) in ${total.toFixed(2)} s` +
      (first !== null ? ` · first token after ${(first - started).toFixed(0)} ms` : "") +
      ` · x-instance-id ${res.headers.get("x-instance-id") ?? "?"}`;
  } finally {
    playAbort = null;
    $("play-stop").disabled = true;
  }
}

$("play-send").addEventListener("click", (ev) => act(ev.currentTarget, "play-error", playSend));
$("play-stop").addEventListener("click", () => playAbort?.abort());
$("play-model").addEventListener("change", renderSnippets);
$("play-prompt").addEventListener("input", renderSnippets);

/** The clipboard where the browser allows it (https or localhost); else the text is selected. */
async function copyText(id) {
  const text = $(id).textContent;
  try {
    await navigator.clipboard.writeText(text);
    $("copy-result").textContent = "copied";
  } catch {
    const range = document.createRange();
    range.selectNodeContents($(id));
    const sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    $("copy-result").textContent = "selected: press Ctrl-C (the clipboard needs https)";
  }
}
$("copy-curl").addEventListener("click", () => void copyText("snippet-curl"));
$("copy-python").addEventListener("click", () => void copyText("snippet-python"));

// ---------------------------------------------------------------- traces

async function refreshTraces() {
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

$("traces-refresh").addEventListener("click", (ev) =>
  act(ev.currentTarget, "traces-error", refreshTraces),
);
$("tracing-enabled").addEventListener("change", (ev) =>
  act(ev.currentTarget, "traces-error", async () => {
    const r = await api("PUT", "/v1/tracing", { enabled: ev.currentTarget.checked });
    ev.currentTarget.checked = r.enabled;
  }),
);

// ---------------------------------------------------------------- runner logs

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

// ---------------------------------------------------------------- node log

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

// ---------------------------------------------------------------- start

function refreshAll() {
  void refreshStorage();
  void loadSettings();
  void refreshTraces();
  void refreshPlayModels();
}

void stream();
refreshAll();
void chartLoop();
setInterval(() => {
  if (document.visibilityState === "visible") {
    void refreshStorage();
    void refreshTraces();
    void refreshPlayModels();
  }
}, 10_000);
