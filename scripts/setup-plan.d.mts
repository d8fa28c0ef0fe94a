// Types of setup-plan.mjs for the TypeScript tests that drive it (packages/engine/src/*.test.ts).
export type SetupMode = "start" | "test" | "publisher" | "compose";
export declare const MODES: readonly SetupMode[];
export declare const USAGE: string;
export type SetupPlan =
  | { readonly help: true }
  | {
      readonly help: false;
      readonly mode: SetupMode;
      readonly engine: boolean;
      readonly portable: boolean;
      /** [command looked up on PATH, Debian package] */
      readonly debian: readonly (readonly [string, string])[];
      /** Whether podman's containers.conf is written where missing (test, compose). */
      readonly containersConf: boolean;
      /** Whether pnpm and the workspace dependencies are installed (all but compose). */
      readonly workspace: boolean;
    };
export declare function setupPlan(argv: readonly string[], env?: NodeJS.ProcessEnv): SetupPlan;
export declare function icLinkDir(
  mode: SetupMode,
  env: NodeJS.ProcessEnv,
  isRoot: boolean,
  home: string,
): string | null;
export declare const CONTAINERS_CONF: string;
