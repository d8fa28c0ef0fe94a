// Front door of @ic/store: the store host (manifests and files over HTTP, hub downloads into the store),
// the staging client (node-local copies, eviction passes, hub fallback) and the storage report.
export {
  StoreHost,
  MANIFEST_FILE,
  type StoreHostOptions,
  type ListenOptions,
  type StoreStats,
  type HubDownloadResult,
} from "./store-host.ts";
export {
  StagingClient,
  DOWNLOAD_FAILED_CAUSES,
  type StagingClientOptions,
  type ModelUsage,
  type HubFallback,
  type StageOptions,
  type StageProgress,
  type StageResult,
  type StagedModel,
  type StagedEntry,
  type DownloadFailed,
  type DownloadFailedCause,
  type EvictionOutcome,
  type PurgeOutcome,
} from "./staging-client.ts";
export {
  createHubSource,
  type HubSource,
  type HubSourceOptions,
  type HubFile,
  type HubListing,
} from "./hub.ts";
export { nodeDisk, type Disk, type VolumeSpace } from "./disk.ts";
export { buildStorageReport, type StorageReportInput } from "./storage-report.ts";
export type { FillProgress } from "./fill.ts";
export { PullManager, type PullManagerOptions, type PullTarget } from "./pulls.ts";
export {
  settled,
  StoreWatch,
  type DirSnapshot,
  type LooseEntry,
  type StoreWatchOptions,
} from "./store-watch.ts";
