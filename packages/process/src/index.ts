// Front door of the process package: the one supervisor loop, the spawn path that dies with the node,
// and the orphan sweep for what a killed node left behind.
export { nextAction } from "./policy.ts";
export type { NextAction, RestartPolicy, RunHistory, RunOutcome } from "./policy.ts";
export { supervise } from "./supervise.ts";
export type { SuperviseOptions, SuperviseResult } from "./supervise.ts";
export { deathSignalAvailable, spawnChild } from "./spawn.ts";
export type { Child, ChildExit, Command, Output, SpawnOptions } from "./spawn.ts";
export { childrenDir, procStat, sweepOrphans, writeChildRecord } from "./children.ts";
export type { ChildRecord, ProcessIdentity, SweepReport } from "./children.ts";
export { canConnect, freePort, freePorts, waitFor } from "./ports.ts";
