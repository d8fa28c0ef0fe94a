// The playground: a chat answer streamed from a ready model (POST /v1/chat/completions, read as
// Server-Sent Events) with its timing, and curl and Python snippets to call the model, to copy.
import { $, showError, syncSelect } from "./dom.js";
import { act, api, ApiError, authHeaders, readSse } from "./api.js";

let playAbort = null;

export async function refreshPlayModels() {
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

export function wirePlayground() {
  $("play-send").addEventListener("click", (ev) => act(ev.currentTarget, "play-error", playSend));
  $("play-stop").addEventListener("click", () => playAbort?.abort());
  $("play-model").addEventListener("change", renderSnippets);
  $("play-prompt").addEventListener("input", renderSnippets);
  $("copy-curl").addEventListener("click", () => void copyText("snippet-curl"));
  $("copy-python").addEventListener("click", () => void copyText("snippet-python"));
}
