import { describe, expect, it } from "vitest";
import { engineCacheRoot, probeCacheRoot } from "./locate.ts";

describe("where the engine's files are", () => {
  it.each([
    [{ XDG_CACHE_HOME: "/c" }, "/c/inference-cluster/engine", "/c/inference-cluster/engine"],
    [{ XDG_CACHE_HOME: "/c", ENGINE_CACHE_DIR: "/e" }, "/e", "/e"],
    // A deployed node: the engine read-only, the verdicts in its state directory.
    [
      { ENGINE_CACHE_DIR: "/e", ENGINE_PROBE_CACHE_DIR: "/var/lib/x/probes" },
      "/e",
      "/var/lib/x/probes",
    ],
  ])("%o: the build in %s, the probes' verdicts in %s", (env, build, probes) => {
    expect(engineCacheRoot(env)).toBe(build);
    expect(probeCacheRoot(env)).toBe(probes);
  });
});
