// Arguments of one node process (main.ts): `--config FILE` and `--help`, parsed strictly.
import { parseArgs } from "node:util";

export const NODE_USAGE = `Usage: node --import tsx services/node/src/main.ts [--config FILE]

Runs one node of the cluster: its nats-server, the cluster agent, the worker, the store host where
configured, and the HTTP API. Configuration: FILE (YAML), else $SERVICE_CONFIG, else the defaults, with
SERVICE_* environment overrides (docs/operations.md). SIGTERM or SIGINT stops it gracefully.

Options:
  --config FILE   the node's YAML configuration
  -h, --help      this help`;

/** The node's arguments: `--config FILE` and `--help`; anything else is a usage error. Pure. */
export function parseNodeArgs(
  argv: readonly string[],
):
  | { kind: "help" }
  | { kind: "run"; config: string | undefined }
  | { kind: "error"; message: string } {
  try {
    const { values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: { config: { type: "string" }, help: { type: "boolean", short: "h" } },
    });
    if (values.help) return { kind: "help" };
    return { kind: "run", config: values.config };
  } catch (e) {
    return {
      kind: "error",
      message: (e instanceof Error ? e.message : String(e)).split(". To specify")[0]!,
    };
  }
}
