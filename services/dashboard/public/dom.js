// DOM and formatting helpers: elements built from data as text (never as markup), tables, selects,
// sizes, durations, times, progress bars and badges. No state and no requests.

/** An element of index.html by id (any: the page's elements are inputs, dialogs and tables alike). */
export const $ = (/** @type {string} */ id) => /** @type {any} */ (document.getElementById(id));

/** An element with attributes (functions become listeners) and children (strings become text). */
export function h(tag, attrs, ...children) {
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
export function table(el, head, rows, empty) {
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

export function bytes(n) {
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

export function ago(ms) {
  if (ms === null || ms === undefined || ms >= Number.MAX_SAFE_INTEGER) return "never";
  return ms < 1000
    ? `${ms} ms`
    : ms < 120_000
      ? `${(ms / 1000).toFixed(1)} s`
      : `${Math.round(ms / 60_000)} min`;
}

export function when(t) {
  if (t === null || t === undefined) return "—";
  const d = new Date(t);
  return Number.isNaN(d.getTime()) ? String(t) : d.toLocaleTimeString();
}

export function bar(done, total, label) {
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

export function badge(text, kind) {
  return h("span", { class: `badge ${kind}` }, text);
}

/** A link only for http(s) URLs (a member's api_url comes from its heartbeat). */
export function safeLink(url, text) {
  try {
    const u = new URL(url);
    if (u.protocol === "http:" || u.protocol === "https:") return h("a", { href: u.href }, text);
  } catch {
    /* not a URL */
  }
  return text;
}

export function showError(id, e) {
  $(id).textContent = e ? (e.code ? `${e.code}: ${e.message}` : String(e.message ?? e)) : "";
}

/** Keeps a select's options in step with `items` ([value, label]) without losing the selection. */
export function syncSelect(el, items, keepEmpty) {
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
