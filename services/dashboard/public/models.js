// The models panel, from the state document: the registered models and whether each is served,
// with a button to remove one from the store, and the pulls from the hub with their progress and
// buttons to cancel, resume or dismiss them; and the form that starts a pull.
import { $, badge, bar, bytes, h, table } from "./dom.js";
import { act, api } from "./api.js";

/** @typedef {import("./state.js").StateDocument} StateDocument */

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

export function renderModels(/** @type {StateDocument} */ doc) {
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

export function renderPulls(/** @type {StateDocument} */ doc) {
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

export function wirePulls() {
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
}
