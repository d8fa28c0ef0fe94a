// Reads the YAML front matter of a model card (README.md) into the hub's `cardData` object.
// Only the subset model cards use at the top level is understood: scalars, flow lists and block lists.

export type CardData = Record<string, unknown>;

function scalar(raw: string): unknown {
  const v = raw.trim();
  if (v === "") return null;
  if ((v.startsWith('"') && v.endsWith('"')) || (v.startsWith("'") && v.endsWith("'"))) {
    return v.slice(1, -1);
  }
  if (v === "true") return true;
  if (v === "false") return false;
  if (v === "null" || v === "~") return null;
  if (/^-?\d+(\.\d+)?$/.test(v)) return Number(v);
  return v;
}

function stripComment(line: string): string {
  const i = line.search(/\s#/);
  return i >= 0 ? line.slice(0, i) : line;
}

/** The front matter between the leading `---` fences, or null when the card has none. */
export function frontMatterText(markdown: string): string | null {
  const m = /^---\r?\n([\s\S]*?)\r?\n---(\r?\n|$)/.exec(markdown);
  return m ? (m[1] ?? "") : null;
}

/** Top-level keys of a model card's front matter; nested maps are skipped. */
export function parseCardData(markdown: string): CardData | null {
  const text = frontMatterText(markdown);
  if (text === null) return null;
  const out: CardData = {};
  let listKey: string | null = null;
  const blockKeys = new Set<string>();
  for (const rawLine of text.split(/\r?\n/)) {
    const line = stripComment(rawLine);
    if (line.trim() === "") continue;
    const item = /^\s*-\s*(.*)$/.exec(line);
    if (/^\s/.test(line) || item) {
      if (listKey !== null && item) {
        const arr = out[listKey];
        if (Array.isArray(arr)) arr.push(scalar(item[1] ?? ""));
      }
      continue;
    }
    const kv = /^([A-Za-z0-9_.-]+)\s*:\s*(.*)$/.exec(line);
    if (!kv) continue;
    const key = kv[1] ?? "";
    const value = (kv[2] ?? "").trim();
    listKey = null;
    if (value === "") {
      out[key] = [];
      listKey = key;
      blockKeys.add(key);
    } else if (value.startsWith("[") && value.endsWith("]")) {
      const inner = value.slice(1, -1).trim();
      out[key] = inner === "" ? [] : inner.split(",").map((s) => scalar(s));
    } else {
      out[key] = scalar(value);
    }
  }
  // A key followed by nothing but nested maps is not a list; drop the empty placeholder.
  for (const k of blockKeys) {
    const v = out[k];
    if (Array.isArray(v) && v.length === 0) delete out[k];
  }
  return out;
}

/** Builds a model card with front matter from top-level keys (strings or lists of strings). */
export function modelCard(data: Record<string, string | readonly string[]>, body = ""): string {
  const lines = ["---"];
  for (const [k, v] of Object.entries(data)) {
    if (typeof v === "string") lines.push(`${k}: ${v}`);
    else {
      lines.push(`${k}:`);
      for (const item of v) lines.push(`- ${item}`);
    }
  }
  lines.push("---", "", body);
  return lines.join("\n");
}
