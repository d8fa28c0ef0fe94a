// The storage panel: each node's models volume, staged copies and staging settings (GET
// /store/storage/cluster), and purging idle staged copies on every node, one model or all. And the
// staging settings editor: this node's file (base section and this node's override) and the values
// applied now, read from and written to /admin/settings.
import { $, badge, bar, bytes, h, showError, table } from "./dom.js";
import { act, api } from "./api.js";

/** @typedef {import("./state.js").ClusterStorage} ClusterStorage */

export async function refreshStorage() {
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

export function wireStorage() {
  $("storage-refresh").addEventListener("click", (ev) =>
    act(ev.currentTarget, "storage-error", refreshStorage),
  );
  $("purge-all").addEventListener("click", (ev) =>
    act(ev.currentTarget, "storage-error", async () => {
      if (!confirm("Purge every staged copy that is not in use, on every node?")) return;
      await purge(null);
    }),
  );
}

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

export async function loadSettings() {
  try {
    fillSettings(await api("GET", "/admin/settings"));
    showError("settings-error", null);
  } catch (e) {
    showError("settings-error", e);
  }
}

export function wireSettings() {
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
}
