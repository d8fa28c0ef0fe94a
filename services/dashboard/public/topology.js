// The topology panel (each member with its telemetry, the round trips between nodes) and the node
// health panel, from the state document.
import { $, ago, badge, bar, bytes, h, safeLink, table } from "./dom.js";
import { nodeName } from "./state.js";

/** @typedef {import("./state.js").StateDocument} StateDocument */

export function renderTopology(/** @type {StateDocument} */ doc) {
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

/** A health entry's badge: an error is bad, a warning warns, info (a background hash) is progress. */
const SEVERITY_BADGE = { error: "bad", warn: "warn", info: "muted" };

export function renderHealth(/** @type {StateDocument} */ doc) {
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
          badge(e.severity, SEVERITY_BADGE[e.severity] ?? "warn"),
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
