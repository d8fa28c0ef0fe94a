// Front door of the config package: schema, loader and per-node staging resolution.
export {
  API_SCOPES,
  ChatSchema,
  ConfigSchema,
  EngineSchema,
  MAX_STAGING_GB,
  StagingSchema,
} from "./schema.ts";
export type {
  ApiScope,
  Config,
  ConfigInput,
  ResolvedTls,
  ResolvedToken,
  StagingConfig,
} from "./schema.ts";
export {
  ConfigError,
  deepMerge,
  expandHome,
  isLoopback,
  loadConfig,
  readConfigFile,
  stagingFor,
} from "./load.ts";
export { ClusterSecret, clusterCredentials, deriveKey } from "./credentials.ts";
export type { ClusterCredentials, SecretChange } from "./credentials.ts";
