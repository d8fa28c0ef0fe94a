// The instances and deployments panel, from the state document: each instance's runners (state,
// staging progress, warm-up, restarts, errors) with a delete button, and each deployment's status
// and why it is pending or failed. And placing a model: the previews of each sharding for a model
// (nodes excluded), each with its placement or typed refusal and a button to place it, and the
// memory each node offers placement.
import { $, badge, bar, bytes, h, table, when } from "./dom.js";
import { act, api } from "./api.js";
import { nodeName } from "./state.js";

/** @typedef {import("./state.js").StateDocument} StateDocument */
/** @typedef {import("./state.js").InstanceView} InstanceView */
/** @typedef {import("./state.js").AssignmentView} AssignmentView */
/** @typedef {import("./state.js").DeploymentView} DeploymentView */

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

export function renderInstances(/** @type {StateDocument} */ doc) {
  table(
    $("instances-table"),
    ["instance", "model", "kind", "sharding", "runners", ""],
    doc.instances.map((inst) => [
      h("code", null, inst.instance_id),
      inst.model_id,
      // Its kind's word, as `ic status` shows it (packages/protocol instance-kinds.ts); records
      // from before kinds say `embeddings: true`.
      inst.kind ?? (inst.embeddings ? "embed" : "generate"),
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
          capacityNote(doc, d),
        ],
        deploymentStatus(d),
      ];
    }),
    "no deployments",
  );
}

/**
 * Capacity that follows demand (docs/capacity.md): a set's scale policy with its ready and target
 * replicas, or a model loaded on demand (or placed with a keep_alive) and when it is unloaded.
 */
function capacityNote(/** @type {StateDocument} */ doc, /** @type {DeploymentView} */ d) {
  const notes = [];
  if (d.scale) {
    const set = (doc.replica_sets ?? []).find((r) => r.replica_set === d.replica_set);
    const retiring = set?.retiring ? ` (+${set.retiring} retiring)` : "";
    const now = set
      ? `: ${set.ready} ready of ${set.target}${retiring}, ${set.outstanding} in flight`
      : "";
    notes.push(
      `follows load, ${d.scale.min_replicas}-${d.scale.max_replicas} replicas, grows above ${d.scale.up_at} in flight each${now}`,
    );
  }
  const keep = d.keep_alive_ms;
  if (d.on_demand || (keep !== undefined && keep >= 0)) {
    const when =
      keep === undefined || keep < 0
        ? "never unloaded"
        : keep === 0
          ? "unloaded after each answer"
          : `unloaded after ${Math.round(keep / 1000)} s idle`;
    notes.push(`${d.on_demand ? "loaded on demand" : "placed"}, ${when}`);
  }
  return notes.length > 0 ? h("div", { class: "muted" }, notes.join("; ")) : null;
}

const DEPLOYMENT_KIND = { Placed: "ok", Pending: "warn", Failing: "bad", Failed: "bad" };

/** A deployment's badge, then why: the refusal, or where its instance failed and the engine's words. */
function deploymentStatus(/** @type {DeploymentView} */ d) {
  const out = [badge(d.status.toLowerCase(), DEPLOYMENT_KIND[d.status] ?? "muted")];
  if (d.instance_id && d.status !== "Failed") out.push(" ", h("code", null, d.instance_id));
  if (d.retiring_since !== undefined) {
    out.push(" ", badge("retiring", "warn"));
    out.push(
      h("div", { class: "muted" }, "a scale-down: no new requests; removed once its requests end"),
    );
  }
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

export function wirePlacement() {
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
}
