// Front door of the worker service: telemetry, link probing, runner supervision and the model registry.
export { TelemetryCollector } from "./telemetry.ts";
export type { TelemetryOptions, TelemetryReading } from "./telemetry.ts";
export { TELEMETRY_KINDS, TelemetryQueue } from "./telemetry-queue.ts";
export type { TelemetryKind, TelemetryQueueOptions, TelemetrySamples } from "./telemetry-queue.ts";
export { LinkProber, RttWindows, RTT_WINDOW } from "./links.ts";
export type { LinkTarget } from "./links.ts";
export { RunnerSupervisor, nextRunnerAction } from "./runner.ts";
export type { RunnerSpec, RunnerStatus, RunOutcome } from "./runner.ts";
export { rpcArgs, serverArgs } from "./args.ts";
export { splitProbeCommands } from "./probe-commands.ts";
export { Worker } from "./worker.ts";
export type { WorkerOptions } from "./worker.ts";
export type { ClusterPort, StagedModel, Stager, StagingProgress } from "./ports.ts";
export { freeTcpPort } from "./net.ts";
export {
  engineComponent,
  telemetryComponent,
  telemetryRoutes,
  workerComponent,
  type EngineComponent,
  type TelemetryComponent,
  type WorkerComponent,
} from "./component.ts";
export { runnerMetrics, telemetryMetrics } from "./metrics.ts";
export type { RunnerView, TelemetrySource } from "./metrics.ts";
export { KvMoves, KV_MOVE_OPERATIONS, kvMoveComponent } from "./kv-move.ts";
export type { KvEngine, KvMoveOptions } from "./kv-move.ts";
