// The HTTP side of moving bytes, which both roles' file routes answer with: a byte range of a file
// (or the whole file) as a response with its length, its range, 416 for a range outside the file,
// and a body that counts what it sends (file-body.ts). The routes themselves stay with their role:
// store-host/routes.ts serves the store's files, staging/routes.ts a node's staged copies to peers.
import type { FileHandle } from "node:fs/promises";
import { fileBody, type BodyCounters } from "./file-body.ts";
import type { RangeResult } from "./range.ts";

/** One answer of a file route: what to send from which file, and the headers that name it. */
export interface FileAnswer {
  /** A path (opened when the body is first read) or a file already open (the body owns it). */
  readonly source: string | FileHandle;
  readonly size: number;
  /** What the request's Range header asked (parseRange). */
  readonly range: RangeResult;
  /** Content type, etag and the like; length and range are added here. */
  readonly headers: Record<string, string>;
  /** HEAD: the headers only. */
  readonly head?: boolean;
  readonly counters: BodyCounters;
  /** Called when a body is about to be sent (not for 416, HEAD or an empty file). */
  readonly onBody?: () => void;
}

/** 206 for a range, 200 for the whole file, 416 (with the file's size) for a range outside it. */
export function fileResponse(a: FileAnswer): Response {
  const { size, range } = a;
  const headers = new Headers(a.headers);
  if (range.kind === "unsatisfiable") {
    headers.set("content-range", `bytes */${size}`);
    return new Response(null, { status: 416, headers });
  }
  const [start, end] = range.kind === "partial" ? [range.start, range.end] : [0, size - 1];
  const length = size === 0 ? 0 : end - start + 1;
  headers.set("content-length", String(length));
  if (range.kind === "partial") headers.set("content-range", `bytes ${start}-${end}/${size}`);
  const status = range.kind === "partial" ? 206 : 200;
  if (a.head || length === 0) return new Response(null, { status, headers });
  a.onBody?.();
  return new Response(fileBody(a.source, { start, end }, a.counters), { status, headers });
}
