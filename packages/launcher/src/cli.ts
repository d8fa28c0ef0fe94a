// `npm start` = `cli.ts start [options]`: the local cluster (local-cluster.ts). Options are
// checked before anything starts; `--help` prints them. `cli.ts bundle <dir>` writes the node's
// bundle there (node-bundle.ts), for the image to run.
import { resolve } from "node:path";
import { parseStartArgs, REPO_ROOT, runLocalCluster, START_USAGE } from "./index.ts";
import { writeNodeBundle } from "./node-bundle.ts";

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === "-h" || command === "--help" || command === "help") {
    process.stdout.write(`${START_USAGE}\n`);
    return 0;
  }
  if (command === "bundle" && rest.length === 1) {
    process.stdout.write(`${await writeNodeBundle(REPO_ROOT, resolve(rest[0]!))}\n`);
    return 0;
  }
  if (command !== undefined && command !== "start") {
    process.stderr.write(
      `unknown command "${command}"; the commands are start (see --help) and bundle <dir>\n`,
    );
    return 2;
  }
  const parsed = parseStartArgs(rest, process.env);
  if (parsed.kind === "help") {
    process.stdout.write(`${START_USAGE}\n`);
    return 0;
  }
  if (parsed.kind === "error") {
    process.stderr.write(`npm start: ${parsed.message} (see --help)\n`);
    return 2;
  }
  return runLocalCluster(parsed.options);
}

void main(process.argv.slice(2)).then((code) => process.exit(code));
