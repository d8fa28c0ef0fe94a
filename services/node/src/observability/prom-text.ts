// The Prometheus text exposition format, as far as re-exporting a scraped engine's metrics needs it:
// parse families (HELP, TYPE, samples), add labels to every sample, render families grouped by name.
// Lines that are not valid samples are skipped (a scraped engine's output is input at an edge).

export interface PromFamily {
  readonly name: string;
  help: string | undefined;
  type: string | undefined;
  readonly samples: PromSample[];
}

export interface PromSample {
  readonly name: string;
  readonly labels: [string, string][];
  readonly value: string;
  readonly timestamp: string | undefined;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const VALUE = /^(?:[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|Inf)|NaN)$/;
const SUFFIXES = ["_bucket", "_sum", "_count", "_total", "_created", "_gsum", "_gcount"];

/** Escapes a label value for the text format. */
export function escapeLabel(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

function escapeHelp(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

/** One sample line, or undefined when it is not valid. */
function parseSample(line: string): PromSample | undefined {
  let i = 0;
  while (i < line.length && /[a-zA-Z0-9_:]/.test(line[i]!)) i++;
  const name = line.slice(0, i);
  if (!NAME.test(name)) return undefined;
  const labels: [string, string][] = [];
  if (line[i] === "{") {
    i++;
    for (;;) {
      while (line[i] === " " || line[i] === ",") i++;
      if (line[i] === "}") {
        i++;
        break;
      }
      const eq = line.indexOf("=", i);
      if (eq < 0) return undefined;
      const label = line.slice(i, eq).trim();
      if (!LABEL.test(label) || line[eq + 1] !== '"') return undefined;
      let v = "";
      let j = eq + 2;
      for (; j < line.length && line[j] !== '"'; j++) {
        if (line[j] === "\\") {
          const n = line[++j];
          v += n === "n" ? "\n" : (n ?? "");
        } else v += line[j];
      }
      if (j >= line.length) return undefined;
      labels.push([label, v]);
      i = j + 1;
    }
  }
  const rest = line.slice(i).trim().split(/\s+/);
  const value = rest[0];
  if (value === undefined || !VALUE.test(value) || rest.length > 2) return undefined;
  const timestamp = rest[1];
  if (timestamp !== undefined && !/^-?\d+$/.test(timestamp)) return undefined;
  return { name, labels, value, timestamp };
}

/** The families of an exposition, in order of first appearance. */
export function parseExposition(text: string): PromFamily[] {
  const families = new Map<string, PromFamily>();
  const family = (name: string): PromFamily => {
    let f = families.get(name);
    if (!f) {
      f = { name, help: undefined, type: undefined, samples: [] };
      families.set(name, f);
    }
    return f;
  };
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "") continue;
    if (line.startsWith("#")) {
      const m = /^#\s+(HELP|TYPE)\s+(\S+)(?:\s+(.*))?$/.exec(line);
      if (!m || !NAME.test(m[2]!)) continue;
      const f = family(m[2]!);
      if (m[1] === "HELP") f.help ??= (m[3] ?? "").replace(/\\n/g, "\n").replace(/\\\\/g, "\\");
      else f.type ??= m[3]?.trim();
      continue;
    }
    const s = parseSample(line);
    if (!s) continue;
    // A histogram's or summary's samples belong to the family their TYPE line named.
    const base = SUFFIXES.map((x) => (s.name.endsWith(x) ? s.name.slice(0, -x.length) : null)).find(
      (b) => b !== null && families.get(b)?.type !== undefined,
    );
    family(base ?? s.name).samples.push(s);
  }
  return [...families.values()].filter((f) => f.samples.length > 0);
}

/** Merges families of several sources (same name: one family), adding each source's labels. */
export function mergeFamilies(
  sources: readonly { labels: readonly [string, string][]; families: readonly PromFamily[] }[],
): PromFamily[] {
  const out = new Map<string, PromFamily>();
  for (const src of sources) {
    const own = new Set(src.labels.map(([k]) => k));
    for (const f of src.families) {
      let m = out.get(f.name);
      if (!m) {
        m = { name: f.name, help: f.help, type: f.type, samples: [] };
        out.set(f.name, m);
      }
      m.help ??= f.help;
      m.type ??= f.type;
      for (const s of f.samples)
        m.samples.push({ ...s, labels: [...src.labels, ...s.labels.filter(([k]) => !own.has(k))] });
    }
  }
  return [...out.values()];
}

/** Renders families in the text format (each family's HELP, TYPE and samples together). */
export function renderFamilies(families: readonly PromFamily[]): string {
  let out = "";
  for (const f of families) {
    if (f.help !== undefined) out += `# HELP ${f.name} ${escapeHelp(f.help)}\n`;
    if (f.type !== undefined) out += `# TYPE ${f.name} ${f.type}\n`;
    for (const s of f.samples) {
      const labels = s.labels.map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(",");
      out += `${s.name}${labels ? `{${labels}}` : ""} ${s.value}`;
      out += s.timestamp !== undefined ? ` ${s.timestamp}\n` : "\n";
    }
  }
  return out;
}
