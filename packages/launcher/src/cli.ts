// `npm start` = `cli.ts start [options]`: the local cluster (local-cluster.ts). Options are
// checked before anything starts; `--help` prints them.
import { parseStartArgs, runLocalCluster, START_USAGE } from "./index.ts";

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === "-h" || command === "--help" || command === "help") {
    process.stdout.write(`${START_USAGE}\n`);
    return 0;
  }
  if (command !== undefined && command !== "start") {
    process.stderr.write(`unknown command "${command}"; the only command is start (see --help)\n`);
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
