// A tiny dotenv reader/writer: `KEY=value` lines, optional `export`, quotes and comments.
// Setting a key rewrites only that line, so other settings and comments in the file survive.

const LINE = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$/;

function unquote(raw: string): string {
  if (raw.length >= 2 && raw.startsWith('"') && raw.endsWith('"')) {
    return raw.slice(1, -1).replace(/\\n/g, "\n").replace(/\\"/g, '"').replace(/\\\\/g, "\\");
  }
  if (raw.length >= 2 && raw.startsWith("'") && raw.endsWith("'")) return raw.slice(1, -1);
  const hash = raw.search(/\s#/);
  return hash >= 0 ? raw.slice(0, hash).trimEnd() : raw;
}

export function parseDotenv(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split(/\r?\n/)) {
    if (/^\s*(#|$)/.test(line)) continue;
    const m = LINE.exec(line);
    if (m) out.set(m[1] ?? "", unquote(m[2] ?? ""));
  }
  return out;
}

function quote(value: string): string {
  return /^[A-Za-z0-9_./:@+-]*$/.test(value)
    ? value
    : `"${value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`;
}

/** The file text with `key` set to `value`: the first assignment replaced, later ones dropped. */
export function setDotenv(text: string, key: string, value: string): string {
  const lines = text === "" ? [] : text.replace(/\r?\n$/, "").split(/\r?\n/);
  const out: string[] = [];
  let done = false;
  for (const line of lines) {
    const m = LINE.exec(line);
    if (m && m[1] === key) {
      if (!done) out.push(`${key}=${quote(value)}`);
      done = true;
    } else out.push(line);
  }
  if (!done) out.push(`${key}=${quote(value)}`);
  return `${out.join("\n")}\n`;
}
