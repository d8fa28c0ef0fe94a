// Types of build-engine.mjs for the TypeScript tests that drive it (packages/engine/src/*.test.ts).
export declare const NODE_LLAMA_CPP_VERSION: string;
export type Backend = "cpu" | "cuda" | "metal";

export interface EngineManifest {
  readonly commit: string;
  readonly backend: Backend;
  readonly variant: string;
  readonly portable: boolean;
  readonly nodeLlamaCppVersion: string;
  readonly builtAt: string;
  readonly binaries: { readonly "llama-server": string; readonly "ggml-rpc-server": string };
}

export declare function engineCacheRoot(): string;
export declare function detectBackend(): Backend;
export declare function isPortable(env?: NodeJS.ProcessEnv): boolean;
export declare function engineVariant(o: { backend: Backend; portable: boolean }): string;
export declare function supportsAllVariants(src: string, platform?: string, arch?: string): boolean;
export declare function cmakeArgs(o: {
  backend: Backend;
  portable?: boolean;
  allVariants?: boolean;
  arch?: string;
}): string[];
export declare function progressOf(line: string): number | null;
export declare function progressPrinter(o: {
  write: (s: string) => void;
  tty: boolean;
  label: string;
  now?: () => number;
}): { update(pct: number): void; end(): void };
export declare function tailOf(file: string, n?: number): string;

export declare class BuildError extends Error {
  constructor(step: string, status: string, logFile: string);
  readonly logFile: string;
  readonly tail: string;
}

export declare function cmakeBuild(o: {
  src: string;
  build: string;
  configureArgs?: readonly string[];
  targets: readonly string[];
  jobs?: number;
  logFile: string;
  write?: (s: string) => void;
  tty?: boolean;
  env?: NodeJS.ProcessEnv;
}): Promise<void>;

export declare function bundleCommit(bundle: string): string;
export declare function ensureEngine(o?: {
  quiet?: boolean;
  env?: NodeJS.ProcessEnv;
}): Promise<EngineManifest>;
