// Front door of @ic/store: the store host (manifests and files over HTTP, hub downloads into the store),
// the staging client (node-local copies, eviction passes, hub fallback) and the storage report.
// Folders, each with its one routes.ts: store-host/ (the store host: its HTTP API, uploads, pulls,
// registration and directory watch), staging/ (the node side: the staging client, its eviction
// passes, the hub fallback, the storage report, staged copies served to peers), transfer/ (moving
// and verifying bytes from the store, peers or the model hub: ranged GETs, the slab pipeline and its
// worker threads, fills, the hub source and which of its files to take, a file route's answer). The
// disk, path and record helpers both roles use stay at the top.
export {
  StoreHost,
  type StoreHostOptions,
  type ListenOptions,
  type StoreStats,
} from "./store-host/store-host.ts";
export { MANIFEST_FILE } from "./store-host/manifests.ts";
export type { HubDownloadResult } from "./store-host/pull-plan.ts";
export { StagingClient } from "./staging/staging-client.ts";
export type { PeerEndpoint } from "./staging/peer-swarm.ts";
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
} from "./staging/staging-types.ts";
export {
  createHubSource,
  type HubSource,
  type HubSourceOptions,
  type HubFile,
  type HubListing,
} from "./transfer/hub.ts";
export { nodeDisk, type Disk, type VolumeSpace } from "./disk.ts";
export { buildStorageReport, type StorageReportInput } from "./staging/storage-report.ts";
export type { FillProgress } from "./transfer/fill.ts";
export { PullManager, type PullManagerOptions, type PullTarget } from "./store-host/pulls.ts";
export {
  settled,
  StoreWatch,
  type DirSnapshot,
  type LooseEntry,
  type StoreWatchOptions,
} from "./store-host/store-watch.ts";
export {
  peerCopyRoutes,
  servePurge,
  storeRoutes,
  type PeerServeStats,
  type StoreRouteOptions,
} from "./staging/routes.ts";
export { pullRoutes, servePulls } from "./store-host/routes.ts";
export { looseEntryHealth, missingModelHealth } from "./store-host/store-health.ts";
export { STORE_OPERATIONS } from "./operations.ts";
export { stagingMetrics } from "./staging/metrics.ts";
export { pullMetrics } from "./store-host/metrics.ts";
export { readModelDir } from "./store-host/registry.ts";
export { storeComponent } from "./component.ts";
export {
  storeHostComponent,
  type StoreHostComponent,
  type StoreHostComponentOptions,
} from "./store-host/component.ts";
