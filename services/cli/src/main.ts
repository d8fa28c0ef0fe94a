// Entry of the ic command. Errors are one line on stderr, never a stack trace: exit 1 when the API
// refused or could not be reached, 2 for a usage mistake.
import { helpText, parse, UsageError } from "./args.ts";
import { ApiError, Client, UnreachableError } from "./client.ts";
import { run } from "./verbs.ts";
import pkg from "../package.json" with { type: "json" };

const VERSION: string = pkg.version;

async function main(): Promise<number> {
  const io = {
    out: (t: string) => void process.stdout.write(t.endsWith("\n") || t === "" ? t : `${t}\n`),
    write: (t: string) => void process.stdout.write(t),
    err: (t: string) => void process.stderr.write(t),
    tty: process.stderr.isTTY === true,
  };
  let parsed;
  try {
    parsed = parse(process.argv.slice(2), process.env);
  } catch (e) {
    process.stderr.write(`ic: ${(e as Error).message}\n`);
    return 2;
  }
  if (parsed.version) {
    process.stdout.write(`ic ${VERSION}\n`);
    return 0;
  }
  if (parsed.help && parsed.verb !== "start") {
    process.stdout.write(`${helpText(parsed.verb || undefined)}\n`);
    return 0;
  }
  try {
    if (parsed.caFile !== undefined) {
      // Loaded only when asked: the TLS client setup costs the other calls nothing.
      const { readFileSync } = await import("node:fs");
      let ca: string;
      try {
        ca = readFileSync(parsed.caFile, "utf8");
      } catch (e) {
        throw new UsageError(`--ca-file: ${(e as Error).message}`);
      }
      (await import("@ic/tls")).trustClusterCa(ca);
    }
    return await run(parsed, new Client({ url: parsed.url, token: parsed.token }), io);
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`ic: ${e.message}\n`);
      return 2;
    }
    if (e instanceof ApiError) process.stderr.write(`ic: ${e.code}: ${e.message}\n`);
    else if (e instanceof UnreachableError) process.stderr.write(`ic: ${e.message}\n`);
    else process.stderr.write(`ic: ${e instanceof Error ? e.message : String(e)}\n`);
    return 1;
  }
}

process.exitCode = await main();
