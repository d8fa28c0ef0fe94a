// Front door of the worker service: telemetry, link probing, runner supervision and the model registry.
export { TELEMETRY_KINDS, TelemetryCollector, TelemetryQueue } from "./telemetry.ts";
export type {
  TelemetryKind,
  TelemetryOptions,
  TelemetryQueueOptions,
  TelemetryReading,
  TelemetrySamples,
} from "./telemetry.ts";
export { LinkProber, RttWindows, RTT_WINDOW } from "./links.ts";
export type { LinkTarget } from "./links.ts";
export { RunnerSupervisor, nextRunnerAction } from "./runner.ts";
export type { RunnerSpec, RunnerStatus, RunOutcome } from "./runner.ts";
export { rpcArgs, serverArgs } from "./args.ts";
export { Worker } from "./worker.ts";
export type { WorkerOptions } from "./worker.ts";
export type { ClusterPort, StagedModel, Stager, StagingProgress } from "./ports.ts";
export { freeTcpPort } from "./net.ts";
export {
  engineComponent,
  telemetryComponent,
  workerComponent,
  type EngineComponent,
  type TelemetryComponent,
  type WorkerComponent,
} from "./component.ts";
