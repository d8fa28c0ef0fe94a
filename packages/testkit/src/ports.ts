// Free loopback ports and polling (from @ic/process), and the testkit's fixtures.
export { freePort, freePorts, waitFor } from "@ic/process";

/** Absolute path of a fixture shipped with the testkit (e.g. "slow-engine.sh"). */
export function fixturePath(name: string): string {
  return new URL(`../fixtures/${name}`, import.meta.url).pathname;
}
