// Front door of the config package: schema, loader and per-node staging resolution.
export { ConfigSchema, StagingSchema } from "./schema.ts";
export type { Config, ConfigInput, StagingConfig } from "./schema.ts";
export { ConfigError, GiB, deepMerge, expandHome, loadConfig, stagingFor } from "./load.ts";
