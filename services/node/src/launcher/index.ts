// Front door of the launcher: real node processes from generated configs, and the local cluster.
export * from "./ports.ts";
export * from "./node-process.ts";
export { parseStartArgs, START_USAGE } from "./start-args.ts";
export type { StartOptions } from "./start-args.ts";
export { runLocalCluster } from "./local-cluster.ts";
