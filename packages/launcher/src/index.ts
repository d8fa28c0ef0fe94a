// Front door of the launcher: real node processes from generated configs, and the local cluster.
export { freePort, freePorts, waitFor } from "@ic/process";
export * from "./node-process.ts";
export { buildBundle } from "./node-bundle.ts";
export { parseStartArgs, START_USAGE } from "./start-args.ts";
export type { StartOptions } from "./start-args.ts";
export { runLocalCluster } from "./local-cluster.ts";
