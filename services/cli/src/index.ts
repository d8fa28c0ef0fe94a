// The ic command's pure parts, for tests, and the resumable-stream client (docs/api.md shows it).
export { helpText, intOption, parse, UsageError, VERBS } from "./args.ts";
export { ago, bytes, formatLogLine, progressBar, purgeText, table, uniqueId } from "./format.ts";
export { DISK_FLOOR_BYTES, evaluate } from "./doctor.ts";
export type { Check, Findings } from "./doctor.ts";
export { resumableStream, StreamError } from "./resumable-stream.ts";
export type { ResumableStreamOptions, StreamEvent } from "./resumable-stream.ts";
