// A llama-server the engine probes start on loopback: spawned with their arguments and a free port,
// its output kept, waited for until its /health answers 200, it exits, or the probe's bound passes;
// and the line of an engine's output that says what went wrong.
import { freePort, spawnChild } from "@ic/process";
import type { Child } from "@ic/process";

/** What a child prints on stdout and stderr, kept up to 64 kB: read it with the returned function. */
export function collectOutput(child: Child): () => string {
  let output = "";
  const collect = (c: Buffer) => {
    if (output.length < 64_000) output += c.toString();
  };
  child.stdout?.on("data", collect);
  child.stderr?.on("data", collect);
  return () => output;
}

/** llama.cpp error lines that only restate the cause given on an earlier line. */
const WRAPPERS = [/exiting due to model loading error/, /failed to load model\b/, /^main: exiting/];

/**
 * The line of an engine's output that says what went wrong: the last error line (llama.cpp marks
 * them ` E `, or they say "error") that is not a mere wrapper of an earlier one, without its
 * timestamp; else the last line.
 */
export function lastError(output: string): string {
  const strip = (l: string) => l.replace(/^[\d.]+ [A-Z] /, "").trim();
  const lines = output
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  const errors = lines.filter((l) => /^[\d.]+ E |\berror\b/i.test(l)).map(strip);
  const cause = errors.filter((l) => !WRAPPERS.some((w) => w.test(l))).at(-1);
  const line = cause ?? errors.at(-1) ?? (lines.length > 0 ? strip(lines.at(-1)!) : "no output");
  return line.slice(0, 300);
}

/**
 * Starts `bin` on a free loopback port: with `args` and `--host 127.0.0.1 --port <free>`, or with
 * what `args(port)` returns when the caller writes the whole command line itself. Resolves once it
 * serves, or with the engine's own words when it exited or did not come up by `deadline`. The child
 * is returned either way: the caller stops it.
 */
export async function startLoopbackServer(
  bin: string,
  args: readonly string[] | ((port: number) => readonly string[]),
  deadline: number,
): Promise<
  { ok: true; child: Child; base: string } | { ok: false; child: Child; evidence: string }
> {
  const port = await freePort();
  const child = spawnChild({
    bin,
    args:
      typeof args === "function"
        ? [...args(port)]
        : [...args, "--host", "127.0.0.1", "--port", String(port)],
    stdout: "pipe",
    stderr: "pipe",
  });
  const output = collectOutput(child);
  const base = `http://127.0.0.1:${port}`;
  let exited = false;
  void child.exited.then(() => (exited = true));
  while (Date.now() < deadline) {
    if (exited) return { ok: false, child, evidence: lastError(output()) };
    const health = await fetch(`${base}/health`, { signal: AbortSignal.timeout(1000) }).catch(
      () => undefined,
    );
    if (health?.status === 200) return { ok: true, child, base };
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    ok: false,
    child,
    evidence: `no answer within the probe's bound; ${lastError(output())}`,
  };
}
