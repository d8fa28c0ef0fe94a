// Weights Publisher GUI: plain DOM over the local /api, no build step.
// The job stream is an EventSource; a reload reconnects to the last job and replays its log.
"use strict";

const $ = (id) => document.getElementById(id);
const JOB_KEY = "weights-publisher.job";

async function api(method, path, body) {
  const res = await fetch(path, {
    method,
    headers: body === undefined ? {} : { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try {
    data = await res.json();
  } catch {
    data = { error: `HTTP ${res.status}` };
  }
  if (!res.ok) {
    const err = new Error((data && data.error) || `HTTP ${res.status}`);
    err.status = res.status;
    err.body = data;
    throw err;
  }
  return data;
}

function text(id, value) {
  $(id).textContent = value === null || value === undefined || value === "" ? "—" : String(value);
}

let tokenSet = false;
let lastDetection = null;
/** True while POST /api/publish is in flight: the button stays disabled (no double submit). */
let publishing = false;

async function refreshToken() {
  const [status, config] = await Promise.all([
    api("GET", "/api/status"),
    api("GET", "/api/config"),
  ]);
  tokenSet = status.hf_token_set;
  const badge = $("token-badge");
  badge.textContent = tokenSet ? "token set" : "no token";
  badge.className = `badge ${tokenSet ? "ok" : "missing"}`;
  $("token-masked").textContent = config.hf_token_masked ?? "none";
  updatePublishButton();
}

function updatePublishButton() {
  const base = $("publish-base").value.trim();
  const sidecar = $("publish-sidecar").value.trim();
  $("publish-button").disabled = publishing || !(tokenSet && base && sidecar);
  $("publish-button").title = tokenSet ? "" : "save a model-hub token first";
}

$("token-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("token-message").textContent = "";
  try {
    await api("POST", "/api/config", { hf_token: $("token-input").value });
    $("token-input").value = "";
    $("token-message").className = "message";
    $("token-message").textContent = "Token saved.";
    await refreshToken();
  } catch (err) {
    $("token-message").className = "error";
    $("token-message").textContent = err.message;
  }
});

$("detect-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("detect-error").textContent = "";
  $("detect-result").hidden = true;
  // The publish form shows the latest detection only: never the previous model's repos.
  lastDetection = null;
  $("publish-base").value = "";
  $("publish-sidecar").value = "";
  updatePublishButton();
  $("detect-button").disabled = true;
  $("detect-button").textContent = "Detecting…";
  try {
    const r = await api("POST", "/api/detect", { url: $("detect-url").value });
    lastDetection = r;
    for (const k of [
      "model_id",
      "base_model",
      "quant",
      "tier",
      "mtp_key_count",
      "sidecar_repo",
      "assistant_model_repo",
    ]) {
      text(`r-${k}`, r[k]);
    }
    text("r-can_publish", r.can_publish ? "yes" : "no");
    text("r-can_publish_assistant", r.can_publish_assistant ? "yes" : "no");
    const list = $("r-mtp_keys");
    list.replaceChildren(
      ...r.mtp_keys.map((k) => Object.assign(document.createElement("li"), { textContent: k })),
    );
    $("detect-result").hidden = false;
    if (r.can_publish) {
      $("publish-base").value = r.base_model;
      $("publish-sidecar").value = r.sidecar_repo;
    }
    $("register-url").value = r.model_id;
    $("find-url").value = r.base_model || r.model_id;
    updatePublishButton();
  } catch (err) {
    $("detect-error").textContent = err.message;
  } finally {
    $("detect-button").disabled = false;
    $("detect-button").textContent = "Detect";
  }
});

$("publish-base").addEventListener("input", updatePublishButton);
$("publish-sidecar").addEventListener("input", updatePublishButton);

const PROGRESS = /^(streaming to disk|uploading \S+): (\d+)\/(\d+) bytes \((\d+)%\)$/;
let source = null;

function setJobState(state) {
  const el = $("job-state");
  el.textContent = state;
  el.className =
    state === "succeeded" ? "state-succeeded" : state === "failed" ? "state-failed" : "";
}

function follow(jobId) {
  if (source) source.close();
  $("publish-log").textContent = "";
  $("publish-progress").value = 0;
  $("progress-label").textContent = "";
  setJobState(`job ${jobId.slice(0, 8)}: running`);
  sessionStorage.setItem(JOB_KEY, jobId);
  let finished = false;
  source = new EventSource(`/api/stream/${encodeURIComponent(jobId)}`);
  source.onmessage = (ev) => {
    const line = ev.data;
    if (line === "[done]") {
      source.close();
      source = null;
      $("publish-button").disabled = false;
      updatePublishButton();
      return;
    }
    $("publish-log").textContent += `${line}\n`;
    $("publish-log").scrollTop = $("publish-log").scrollHeight;
    const m = PROGRESS.exec(line);
    if (m) {
      const pct = Number(m[4]);
      const overall = m[1] === "streaming to disk" ? pct / 2 : 50 + pct / 2;
      $("publish-progress").value = overall;
      $("progress-label").textContent = `${m[1]} ${pct}%`;
    }
    if (line === "publish complete") {
      finished = true;
      $("publish-progress").value = 100;
      $("progress-label").textContent = "done";
      setJobState("succeeded");
    } else if (line.startsWith("[error]:")) {
      finished = true;
      setJobState("failed");
      $("progress-label").textContent = "";
    }
  };
  source.onerror = () => {
    // A dropped connection reconnects on its own; a refused one (404: evicted) closes the source.
    // Ask the server which it was before forgetting the job: a page unload also lands here.
    if (!source || source.readyState !== EventSource.CLOSED || finished) return;
    source = null;
    const probe = new AbortController();
    fetch(`/api/stream/${encodeURIComponent(jobId)}`, { signal: probe.signal })
      .then((res) => {
        probe.abort();
        if (res.status === 404) {
          setJobState("job no longer available");
          sessionStorage.removeItem(JOB_KEY);
        } else {
          follow(jobId);
        }
      })
      .catch(() => undefined);
  };
}

$("publish-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  if (publishing) return;
  publishing = true;
  updatePublishButton();
  $("publish-error").textContent = "";
  try {
    const { job_id } = await api("POST", "/api/publish", {
      base_model: $("publish-base").value.trim(),
      sidecar_repo: $("publish-sidecar").value.trim(),
    });
    follow(job_id);
  } catch (err) {
    $("publish-error").textContent = err.status === 429 ? `Busy: ${err.message}` : err.message;
    // 409: another job publishes to this repo; show its log.
    if (err.status === 409 && err.body && typeof err.body.job_id === "string") {
      follow(err.body.job_id);
    }
  } finally {
    publishing = false;
    updatePublishButton();
  }
});

$("register-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("register-error").textContent = "";
  $("register-result").hidden = true;
  try {
    const r = await api("POST", "/api/register", { url: $("register-url").value });
    $("register-key").textContent = r.key;
    $("register-path").textContent = r.catalog_path;
    $("register-block").textContent = r.entry_block;
    $("register-result").hidden = false;
  } catch (err) {
    $("register-error").textContent = err.message;
  }
});

$("find-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("find-error").textContent = "";
  $("find-result").hidden = true;
  try {
    const r = await api("POST", "/api/catalog/find", { url: $("find-url").value });
    const rows = r.entries.map((e) => {
      const tr = document.createElement("tr");
      for (const k of [
        "key",
        "hf_repo",
        "quant",
        "tier",
        "output_name",
        "sidecar_repo",
        "assistant_model_repo",
      ]) {
        const td = document.createElement("td");
        td.textContent = e[k] ?? "—";
        tr.append(td);
      }
      return tr;
    });
    $("find-rows").replaceChildren(...rows);
    $("find-result").hidden = false;
  } catch (err) {
    $("find-error").textContent =
      err.status === 404 ? `No catalog entry for ${err.body.source_model}.` : err.message;
  }
});

refreshToken().catch((err) => {
  $("token-message").className = "error";
  $("token-message").textContent = err.message;
});
// Leaving or reloading the page closes the stream first, so its error handler does not
// mistake the unload for a vanished job; the job keeps running and a reload resumes it.
window.addEventListener("pagehide", () => {
  if (source) source.close();
  source = null;
});
const resumeJob = sessionStorage.getItem(JOB_KEY);
if (resumeJob) follow(resumeJob);
