// Front door of the engine package: locating and checking llama.cpp binaries, and capability health.
export { engineCacheRoot, locateEngine, managedBuild, probeCacheRoot } from "./locate.ts";
export type { LocateOptions, ManagedBuild } from "./locate.ts";
export { nodeHealth } from "./health.ts";
export type { Observations } from "./health.ts";
export { probeSplitSupport, probeTls } from "./capabilities.ts";
export { lastError } from "./loopback-server.ts";
export type { ProbeModel, ProbeOptions, SplitCommands, SplitMode } from "./capabilities.ts";
export { probeSlotRestore } from "./slot-probe.ts";
