// The operator dashboard: plain DOM over this node's HTTP API, no build step. The page loads this
// module, the entry that wires the others (native ES modules from this origin). The cluster state
// arrives as Server-Sent Events from GET /state/stream (read with fetch, so the bearer token goes in
// a header); the other panels ask their endpoints. Every value is put in the page as text, never
// as markup, and the Content-Security-Policy allows scripts and styles from this origin only.
//
// The modules: dom.js (elements and formatting), state.js (the token, the last state document,
// node names), api.js (requests with the token, the token prompt, the SSE reader), live.js (the
// state stream and its rendering), topology.js (nodes, links, node health), instances.js
// (instances, deployments, placing a model), models.js (models, pulls), storage.js (storage,
// purge, the staging settings editor), charts.js, playground.js, logs.js (the event log, traces,
// runner and node logs).
import { $ } from "./dom.js";
import { shared, TOKEN_KEY } from "./state.js";
import { restartStream, stream } from "./live.js";
import { wirePlacement } from "./instances.js";
import { wirePulls } from "./models.js";
import { loadSettings, refreshStorage, wireSettings, wireStorage } from "./storage.js";
import { refreshTraces, wireEvents, wireLogs, wireTraces } from "./logs.js";
import { chartLoop } from "./charts.js";
import { refreshPlayModels, wirePlayground } from "./playground.js";

// ---------------------------------------------------------------- token

$("token-open").addEventListener("click", () => $("token-dialog").showModal());
$("token-cancel").addEventListener("click", () => $("token-dialog").close());
$("token-clear").addEventListener("click", () => {
  shared.token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  localStorage.removeItem(TOKEN_KEY);
  $("token-dialog").close();
  restartStream();
});
$("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  shared.token = $("token-input").value.trim();
  $("token-input").value = "";
  sessionStorage.setItem(TOKEN_KEY, shared.token);
  if ($("token-remember").checked) localStorage.setItem(TOKEN_KEY, shared.token);
  else localStorage.removeItem(TOKEN_KEY);
  $("token-dialog").close();
  restartStream();
  refreshAll();
});

// ---------------------------------------------------------------- panels

wirePlacement();
wirePulls();
wireStorage();
wireSettings();
wireEvents();
wirePlayground();
wireTraces();
wireLogs();

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
