// The ic command's pure parts, for tests: argument parsing, output formatting, doctor's evaluation.
export { helpText, intOption, parse, UsageError, VERBS } from "./args.ts";
export { ago, bytes, formatLogLine, progressBar, purgeText, table, uniqueId } from "./format.ts";
export { DISK_FLOOR_BYTES, evaluate } from "./doctor.ts";
export type { Check, Findings } from "./doctor.ts";
