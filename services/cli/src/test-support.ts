// Test-only: the `ic` command run as a user runs it, its exit code and both outputs. The code is
// bin/ic.mjs's (src/main.ts), run from an esbuild bundle built once per test file: through tsx's
// loader a run took 0.7 s of CPU, from the bundle 0.35 s, and the CLI's integration tests run it
// some 50 times. BIN (tsx, as installed) is what the follower test spawns.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { buildBundle, REPO_ROOT } from "@ic/testkit";

export const BIN = fileURLToPath(new URL("../bin/ic.mjs", import.meta.url));

let bundled: Promise<string> | undefined;
function icMain(): Promise<string> {
  bundled ??= buildBundle(REPO_ROOT, { ic: "services/cli/src/main.ts" }, "ic-cli").then(
    (b) => b.main,
  );
  return bundled;
}

export async function ic(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number | null; out: string; err: string }> {
  const main = await icMain();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [main, ...args], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (c: Buffer) => (out += c.toString()));
    child.stderr.on("data", (c: Buffer) => (err += c.toString()));
    child.on("exit", (code) => resolve({ code, out, err }));
  });
}
