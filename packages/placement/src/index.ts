// Front door of the placement package: the memory model, place() and previews(), all pure.
// The gateway builds PlacementInput from its cluster view and maps results onto HTTP and commands.
export {
  DEFAULT_MEMORY_MODEL,
  GB,
  MIN_AUTO_CONTEXT,
  contextLadder,
  effectiveContext,
  estimateNodeRequirement,
  fits,
  gb,
  invalidMemoryModel,
  invalidModelFacts,
  kvCacheBytes,
  resolveMemoryModel,
  splitLayers,
} from "./memory.ts";
export type { MemoryModel, ModelFacts, NodeRequirement } from "./memory.ts";
export { memoryMessage } from "./refusals.ts";
export type { Refusal, RefusalCode } from "./refusals.ts";
export { buildGraph, isCycle, largestBlock, searchCycles } from "./topology.ts";
export type { LinkEdge, LinkGraph } from "./topology.ts";
export { DEFAULT_SEARCH_BUDGET, SHARDINGS, place, previews } from "./place.ts";
export type {
  CandidateNode,
  NodeShare,
  Placement,
  PlacementInput,
  PlacementResult,
  PreviewEntry,
  PreviewInput,
  Sharding,
} from "./place.ts";
export {
  availableBytes,
  checkInstance,
  clusterLinks,
  modelFacts,
  nodeCapacities,
  placeInCluster,
  previewCluster,
  refusalError,
  unavailableReason,
} from "./cluster.ts";
export type {
  ClusterPlacement,
  ClusterPlacementResult,
  ClusterPreviewEntry,
  ClusterRefusal,
  ClusterRefusalCode,
  ClusterRequest,
  InstanceCheck,
  NodeCapacity,
  NodeReport,
  Unavailable,
} from "./cluster.ts";
export { assignmentsOf } from "./cluster.ts";
export { planLoad, unloadCandidates } from "./room.ts";
export type { InstanceUse, LoadPlan, Unload } from "./room.ts";
