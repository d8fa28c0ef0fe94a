// The live cluster state: GET /state/stream read with fetch (so the bearer token goes in a header)
// as Server-Sent Events, each state document rendered into the header and the panels that show
// it, and after a change of the replica the event log and storage asked again.
import { $, syncSelect } from "./dom.js";
import { askToken, authHeaders, readSse } from "./api.js";
import { nodeName, shared } from "./state.js";
import { renderHealth, renderTopology } from "./topology.js";
import { renderInstances } from "./instances.js";
import { renderModels, renderPulls } from "./models.js";
import { refreshEvents } from "./logs.js";
import { refreshStorage } from "./storage.js";
import { refreshPlayModels } from "./playground.js";

/** @typedef {import("./state.js").StateDocument} StateDocument */

let streamAbort = null;

function setLive(text, kind) {
  $("live").textContent = text;
  $("live").className = `badge ${kind}`;
}

export function restartStream() {
  streamAbort?.abort();
  void stream();
}

export async function stream() {
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

function render(/** @type {StateDocument} */ doc) {
  const changed =
    shared.state === null ||
    shared.state.index !== doc.index ||
    shared.state.session?.session_id !== doc.session?.session_id;
  shared.state = doc;
  shared.names = new Map(doc.node_identities.map((n) => [n.node_id, n.name]));
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

let followTimer = null;
let followAt = 0;

/**
 * After a change of the replica: the event log, storage and the playground's ready models again, at
 * most once a second (a model that turns ready is offered at once, not at the next 10 s refresh).
 */
function scheduleFollowUps() {
  if (followTimer) return;
  const wait = Math.max(0, followAt + 1000 - Date.now());
  followTimer = setTimeout(() => {
    followTimer = null;
    followAt = Date.now();
    void refreshEvents();
    void refreshStorage();
    void refreshPlayModels();
  }, wait);
}
