// Front door of the weights publisher: the server, its app factory and the pieces tests compose.
// The program itself is main.ts (`npm run publisher`).
export { createPublisherApp } from "./app.ts";
export type { PublisherAppDeps } from "./app.ts";
export { Catalog, CatalogEntrySchema, collision, entryBlock } from "./catalog.ts";
export type { CatalogEntry, NewCatalogEntry } from "./catalog.ts";
export { FakeClock, systemClock } from "@ic/protocol";
export type { Clock, TimerHandle } from "@ic/protocol";
export { BUILTIN_CATALOG, loadConfig, PUBLIC_DIR, TOOL_NAME } from "./config.ts";
export type { PublisherConfig } from "./config.ts";
export { Detector } from "./detector.ts";
export type { Detection, DetectionResult } from "./detector.ts";
export { PublisherError, statusFor } from "./errors.ts";
export type { PublisherErrorCode } from "./errors.ts";
export { createHubClient } from "./hub-client.ts";
export type { HubClient, HubModel, RemoteFile } from "./hub-client.ts";
export {
  _JOB_RETENTION_SECONDS,
  DONE_LINE,
  ERROR_PREFIX,
  JobManager,
  MAX_CONCURRENT_JOBS,
  SUCCESS_LINE,
} from "./jobs.ts";
export { parseModelRef, parseRepoId } from "./model-ref.ts";
export type { RepoId } from "./model-ref.ts";
export { runPublish } from "./publish.ts";
export type { PublishRequest } from "./publish.ts";
export type { RegistrationResult } from "./registration.ts";
export { ALLOWED_QUANTS, SIDECAR_FILE } from "./rules.ts";
export { BIND_HOST, PublisherServer } from "./server.ts";
export type { PublisherServerOptions } from "./server.ts";
export { maskToken, TokenStore } from "./token-store.ts";
