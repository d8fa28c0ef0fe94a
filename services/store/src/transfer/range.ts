// Parsing of a single HTTP byte range (RFC 9110 section 14) for the store host's file endpoint.
// Multi-range requests are answered with the whole file, which RFC 9110 allows a server to do.
export type RangeResult =
  | { readonly kind: "full" }
  | { readonly kind: "partial"; readonly start: number; readonly end: number }
  | { readonly kind: "unsatisfiable" };

/** Interprets a Range header against a file of `size` bytes; `end` is inclusive. */
export function parseRange(header: string | undefined, size: number): RangeResult {
  if (header === undefined) return { kind: "full" };
  const m = /^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$/i.exec(header);
  if (!m) return { kind: "full" };
  const [, a = "", b = ""] = m;
  if (a === "" && b === "") return { kind: "full" };
  if (a === "") {
    const suffix = Number(b);
    if (suffix === 0 || size === 0) return { kind: "unsatisfiable" };
    return { kind: "partial", start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(a);
  if (!Number.isSafeInteger(start) || start >= size) return { kind: "unsatisfiable" };
  const end = b === "" ? size - 1 : Math.min(Number(b), size - 1);
  if (!Number.isSafeInteger(end) || end < start) return { kind: "unsatisfiable" };
  return { kind: "partial", start, end };
}

/** Parses `bytes <start>-<end>/<total>` from a 206 response; null when malformed. */
export function parseContentRange(
  header: string | null,
): { start: number; end: number; total: number } | null {
  if (!header) return null;
  const m = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(header.trim());
  if (!m) return null;
  return { start: Number(m[1]), end: Number(m[2]), total: Number(m[3]) };
}
