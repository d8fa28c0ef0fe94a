// Front door of the state package: the replicated state machine, the sequencer's command rule,
// the reconcile of deployments and the election rule -- all pure.
export { apply, OutOfOrderEvent } from "./apply.ts";
export { decide } from "./decide.ts";
export type { CommandDecision, DecideContext, IdKind } from "./decide.ts";
export {
  evacuatingDeployments,
  failingInstances,
  lostDeployments,
  MAX_FAILURE_ATTEMPTS,
  reconcile,
} from "./reconcile.ts";
export type { ReconcileAction, ReconcileOptions } from "./reconcile.ts";
export { compareSeniority, elect, mostSenior, nodeIdFor } from "./election.ts";
export type { ElectionDecision, ElectionInput, HeardPeer, Peer } from "./election.ts";
export { DEFAULT_TASK_BOUNDS, TaskTable } from "./tasks.ts";
export type { TaskBounds } from "./tasks.ts";
export { checkTokenLimits, LIMIT_WINDOW_MS, TokenWindows } from "./token-limits.ts";
export { amendWrites, intentWrites, RESTORED, restoreIntent } from "./intent.ts";
export type { Restore } from "./intent.ts";
export { idleUnloads, instanceUse, InstanceUsage, UNUSED_GRACE_MS } from "./usage.ts";
export type { IdleUnload } from "./usage.ts";
export { DEFAULT_SCALE_WINDOWS, replicaSets, scaleSets, scaleStep } from "./scaling.ts";
export type { ScaleMemo, ScaleSet, ScaleStep, ScaleWindows } from "./scaling.ts";
export { servedOrLoading } from "./placed.ts";
