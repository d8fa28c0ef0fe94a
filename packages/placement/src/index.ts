// Front door of the placement package: the memory model, place() and previews(), all pure.
export {
  DEFAULT_MEMORY_MODEL,
  GB,
  gb,
  kvCacheBytes,
  requirementFor,
  splitLayers,
} from "./memory.ts";
export type { MemoryModel, ModelFacts, ShareRequirement } from "./memory.ts";
export { httpStatusOf, memoryMessage, place, previews, REFUSAL_CODES, sharesFor } from "./place.ts";
export type {
  CandidateNode,
  LinkEdge,
  NodeShare,
  PlacementInput,
  PlacementResult,
  PreviewEntry,
  RefusalCode,
  Sharding,
} from "./place.ts";
