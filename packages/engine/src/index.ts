// Front door of the engine package: locating and checking llama.cpp binaries, and capability health.
export { engineCacheRoot, locateEngine, managedBuild } from "./locate.ts";
export type { LocateOptions, ManagedBuild } from "./locate.ts";
export { nodeHealth } from "./health.ts";
export type { Observations } from "./health.ts";
export { lastError, probeSplitSupport, probeTls } from "./capabilities.ts";
export type { ProbeOptions } from "./capabilities.ts";
export { probeSlotRestore } from "./slot-probe.ts";
