// The charts over the last hour (requests/s by status, completion tokens/s, time to first token,
// memory per node) from GET /v1/diagnostics/series, drawn as SVG with no library, asked again
// every sample interval while the page is visible.
import { $, bytes, h, showError } from "./dom.js";
import { api } from "./api.js";

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

export async function chartLoop() {
  const step = await refreshCharts();
  setTimeout(
    () => {
      if (document.visibilityState === "visible") void chartLoop();
      else document.addEventListener("visibilitychange", () => void chartLoop(), { once: true });
    },
    Math.max(1000, step),
  );
}
