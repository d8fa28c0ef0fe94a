// Front door of the worker service: telemetry, link probing, runner supervision and the model registry.
export { TelemetryCollector } from "./telemetry.ts";
export type { TelemetryOptions } from "./telemetry.ts";
export { LinkProber } from "./links.ts";
export type { LinkTarget } from "./links.ts";
export { RunnerSupervisor, nextRunnerAction } from "./runner.ts";
export type { RunnerSpec, RunnerStatus, RunOutcome } from "./runner.ts";
export { rpcArgs, serverArgs } from "./args.ts";
export { Worker } from "./worker.ts";
export type { WorkerOptions } from "./worker.ts";
export type { ClusterPort, StagedModel, Stager, StagingProgress } from "./ports.ts";
export { readModelDir } from "./registry.ts";
export { freeTcpPort } from "./net.ts";
