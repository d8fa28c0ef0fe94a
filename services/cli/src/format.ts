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
