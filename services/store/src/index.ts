// Front door of @ic/store: the store host (manifests and files over HTTP, hub downloads into the store),
// the staging client (node-local copies, eviction passes, hub fallback) and the storage report.
// Folders: host/ (the store host, its uploads, pulls and directory watch), client/ (the staging
// client and the storage report), transfer/ (moving and verifying bytes: ranged GETs, the slab
// pipeline and its worker threads, fills), hub/ (the model hub and which of its files to take); the
// disk, path and record helpers both roles use stay at the top.
export {
  StoreHost,
  type StoreHostOptions,
  type ListenOptions,
  type StoreStats,
} from "./host/store-host.ts";
export { MANIFEST_FILE } from "./host/manifests.ts";
export type { HubDownloadResult } from "./host/hub-download.ts";
export { StagingClient } from "./client/staging-client.ts";
export type { PeerEndpoint } from "./client/peer-swarm.ts";
export { peerCopyRoutes, type PeerServeStats } from "./client/peer-routes.ts";
export {
  DOWNLOAD_FAILED_CAUSES,
  type StagingClientOptions,
  type StagingCounters,
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
} from "./client/staging-types.ts";
export {
  createHubSource,
  type HubSource,
  type HubSourceOptions,
  type HubFile,
  type HubListing,
} from "./hub/hub.ts";
export { nodeDisk, type Disk, type VolumeSpace } from "./disk.ts";
export { buildStorageReport, type StorageReportInput } from "./client/storage-report.ts";
export type { FillProgress } from "./transfer/fill.ts";
export { PullManager, type PullManagerOptions, type PullTarget } from "./host/pulls.ts";
export {
  settled,
  StoreWatch,
  type DirSnapshot,
  type LooseEntry,
  type StoreWatchOptions,
} from "./host/store-watch.ts";
export {
  looseEntryHealth,
  missingModelHealth,
  pullRoutes,
  servePulls,
  servePurge,
  storeRoutes,
  type StoreRouteOptions,
} from "./routes.ts";
export { STORE_OPERATIONS } from "./operations.ts";
export { readModelDir } from "./host/registry.ts";
export { storeComponent } from "./component.ts";
export {
  storeHostComponent,
  type StoreHostComponent,
  type StoreHostComponentOptions,
} from "./host/component.ts";
