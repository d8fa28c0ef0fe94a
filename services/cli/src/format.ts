// Terminal output of the ic command: aligned tables, byte sizes, progress bars. Pure.

/** Columns padded to their widest cell; the header underlined by nothing but spacing. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  return [line(header), ...rows.map(line)].join("\n");
}

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

export function bytes(n: number | null | undefined): string {
  if (n === null || n === undefined) return "-";
  let v = n;
  let u = 0;
  while (v >= 1024 && u < UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${v} B` : `${v.toFixed(v >= 100 ? 0 : 1)} ${UNITS[u]}`;
}

/** `[#######-----]  42%  1.2 GiB / 2.9 GiB`; without a total, the bytes so far. */
export function progressBar(done: number, total: number | null, width = 24): string {
  if (!total) return `${bytes(done)}`;
  const f = Math.max(0, Math.min(1, done / total));
  const full = Math.round(f * width);
  return `[${"#".repeat(full)}${"-".repeat(width - full)}] ${String(Math.floor(f * 100)).padStart(3)}%  ${bytes(done)} / ${bytes(total)}`;
}

export function ago(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "-";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60_000)} min`;
}

const LEVEL_NAMES: Record<number, string> = {
  10: "TRACE",
  20: "DEBUG",
  30: "INFO",
  40: "WARN",
  50: "ERROR",
  60: "FATAL",
};

/** The fields an operator looks for, in this order, under the names they print with. */
const KEY_FIELDS: readonly (readonly [string, readonly string[]])[] = [
  ["node", ["node", "node_name", "peer"]],
  ["model", ["model", "model_id"]],
  ["instance", ["instance", "instance_id"]],
  ["rank", ["rank"]],
  ["code", ["code"]],
  ["error", ["error", "err", "last_error", "reason"]],
];

/** One value on one line: newlines folded, strings with spaces quoted, long ones cut. */
function oneLine(v: unknown): string {
  let s: string;
  if (typeof v === "string") s = v;
  else if (v && typeof v === "object" && typeof (v as { message?: unknown }).message === "string")
    s = (v as { message: string }).message;
  else s = JSON.stringify(v) ?? String(v);
  s = s.replace(/\s*\n\s*/g, " ⏎ ");
  if (s.length > 300) s = `${s.slice(0, 299)}…`;
  return /[\s"=]/.test(s) ? JSON.stringify(s) : s;
}

/**
 * A node's pino JSON log line as one readable line:
 * `2026-11-26T06:42:10.123Z WARN  worker  runner failed  model=acme/x rank=0 error="…"`.
 * Lines that are not pino's (`{raw}`) print as they are.
 */
export function formatLogLine(l: Record<string, unknown>): string {
  if (typeof l["raw"] === "string" && l["msg"] === undefined) return oneLine(l["raw"]);
  const t = l["time"];
  const time = typeof t === "number" ? new Date(t).toISOString() : typeof t === "string" ? t : "-";
  const lv = l["level"];
  const level = (
    typeof lv === "number" ? (LEVEL_NAMES[lv] ?? String(lv)) : String(lv ?? "-")
  ).padEnd(5);
  const component = typeof l["component"] === "string" ? l["component"] : "-";
  const msg = typeof l["msg"] === "string" ? l["msg"].replace(/\s*\n\s*/g, " ⏎ ") : "";
  const keys: string[] = [];
  for (const [name, sources] of KEY_FIELDS) {
    const src = sources.find((k) => l[k] !== undefined && l[k] !== null);
    if (src) keys.push(`${name}=${oneLine(l[src])}`);
  }
  return [time, level, component, msg, ...(keys.length ? [keys.join(" ")] : [])].join("  ");
}

/** What `POST /store/purge-staging` answered, in words; says why when nothing was freed. */
export interface PurgeAnswer {
  readonly deleted_bytes: number;
  readonly not_answered: readonly string[];
  readonly nodes: readonly {
    readonly name: string;
    readonly ok: boolean;
    readonly deleted: readonly string[];
    readonly freed_bytes: number;
    readonly skipped_in_use: readonly string[];
    readonly error?: { readonly message: string } | undefined;
  }[];
}

export function purgeText(r: PurgeAnswer, model?: string): string {
  const lines: string[] = [];
  for (const n of r.nodes) {
    const parts: string[] = [];
    if (n.deleted.length > 0) parts.push(`freed ${bytes(n.freed_bytes)} (${n.deleted.join(", ")})`);
    if (n.skipped_in_use.length > 0) parts.push(`kept in use: ${n.skipped_in_use.join(", ")}`);
    if (!n.ok) parts.push(`failed: ${n.error?.message ?? "no reason given"}`);
    if (parts.length > 0) lines.push(`${n.name}: ${parts.join("; ")}`);
  }
  const inUse = r.nodes.some((n) => n.skipped_in_use.length > 0);
  const what = model ? `staged copies of ${model}` : "staged copies";
  let total = `freed ${bytes(r.deleted_bytes)} in all`;
  if (r.deleted_bytes === 0)
    total = inUse
      ? `freed nothing: every ${what.replace("copies", "copy")} left is in use by an instance (delete the instance first)`
      : `freed nothing: no node holds ${what} (the store's own files are never purged)`;
  lines.push(total);
  if (r.not_answered.length > 0) lines.push(`no answer from ${r.not_answered.join(", ")}`);
  return lines.join("\n");
}

/**
 * The one id among `ids` that `ref` names: the id itself, or a prefix only it has. Throws with the
 * candidates when none or several match.
 */
export function uniqueId(ref: string, ids: readonly string[], what: string): string {
  if (ids.includes(ref)) return ref;
  const matches = ids.filter((id) => id.startsWith(ref));
  if (matches.length === 1) return matches[0]!;
  if (matches.length === 0)
    throw new Error(
      `no ${what} id starts with "${ref}"${ids.length > 0 ? ` (${what}s: ${ids.join(", ")})` : ` (there are no ${what}s)`}`,
    );
  throw new Error(`"${ref}" names several ${what}s: ${matches.join(", ")}; type more of the id`);
}
