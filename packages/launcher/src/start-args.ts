// Options of `npm start` (`cli.ts start`), parsed with util.parseArgs (strict): every value checked
// here, so a mistake is one clear line and exit code 2 before anything starts.
import { parseArgs } from "node:util";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import { parseModelRef, type PullBody } from "@ic/protocol";

export interface StartOptions {
  /** Nodes of the local cluster (1-16). */
  readonly nodes: number;
  /** API port of the first node; node k gets port + k - 1 (a busy one: any free port). */
  readonly port: number;
  /** Where the cluster keeps its store, secret, and each node's data and logs. */
  readonly dataDir: string;
  /** Also copy every node's log lines to this terminal. */
  readonly verbose: boolean;
  /** A YAML file merged over the launcher's defaults on every node (kept for later launches). */
  readonly configFile?: string | undefined;
  /** A hub model to pull into the store and place instead of the demo model. */
  readonly model?: PullBody | undefined;
}

export const START_USAGE = `Usage: npm start [-- options]
       node --import tsx packages/launcher/src/cli.ts start [options]

Starts a local cluster on this machine (loopback only), generates the tiny demo model into the first
node's store, places it (or, with --model, pulls and places that one), and prints the base URL.
Ctrl-C stops every node.

Options:
  --model REF      pull org/repo[:QUANT][@revision] from the model hub (model_store.hub_url, default
                   https://huggingface.co; HF_TOKEN is sent) and place it instead of the demo model,
                   e.g. --model Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M
  --config FILE    YAML merged over the defaults on every node (engine.context_size,
                   engine.extra_args, gpu_layers, model_store.hub_url, auth...); kept for later
                   launches on the same --data-dir
  --nodes N        nodes of the local cluster, 1-16 (default 1)
  --port P         API port of the first node; node k gets P + k - 1, or any free port where that one
                   is taken (default 8080)
  --data-dir DIR   store, cluster secret, and each node's data and logs
                   (default $IC_DATA_DIR, else ~/.service/local-cluster)
  --verbose        also copy every node's log lines to this terminal
  -h, --help       this help

Each node's log (pino JSON lines) goes to <data-dir>/node-<k>/node.log; the runners' logs to
<data-dir>/node-<k>/runners/. Each node's config is <data-dir>/node-<k>/config.yaml: keys set there
(by hand, by --config or in the dashboard) are kept across launches, except the ones the launcher
owns (names, ports, peers, the secret, file locations). Every other key has its documented default
(docs/operations.md).`;

export type ParsedStart =
  | { readonly kind: "help" }
  | { readonly kind: "start"; readonly options: StartOptions }
  | { readonly kind: "error"; readonly message: string };

function integer(name: string, raw: string, min: number, max: number): number | string {
  if (!/^\d+$/.test(raw)) return `--${name} must be a whole number, not "${raw}"`;
  const n = Number(raw);
  if (n < min || n > max) return `--${name} must be between ${min} and ${max}, not ${n}`;
  return n;
}

/** Parses the arguments after `start`; `env` supplies IC_DATA_DIR. Pure. */
export function parseStartArgs(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>> = {},
  home = homedir(),
): ParsedStart {
  let values;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        nodes: { type: "string" },
        port: { type: "string" },
        "data-dir": { type: "string" },
        verbose: { type: "boolean" },
        model: { type: "string" },
        config: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (e) {
    // parseArgs' messages name the option; drop its hint about positionals' "--".
    const message = (e instanceof Error ? e.message : String(e)).split(". To specify")[0]!;
    return { kind: "error", message };
  }
  if (values.help) return { kind: "help" };
  const nodes = values.nodes === undefined ? 1 : integer("nodes", values.nodes, 1, 16);
  if (typeof nodes === "string") return { kind: "error", message: nodes };
  const port = values.port === undefined ? 8080 : integer("port", values.port, 1, 65535);
  if (typeof port === "string") return { kind: "error", message: port };
  if (port + nodes - 1 > 65535)
    return { kind: "error", message: `--port ${port} leaves no room for ${nodes} nodes` };
  const dataDir =
    values["data-dir"] ?? env["IC_DATA_DIR"] ?? join(home, ".service", "local-cluster");
  if (dataDir.trim() === "") return { kind: "error", message: "--data-dir must not be empty" };
  let model: PullBody | undefined;
  if (values.model !== undefined) {
    try {
      model = parseModelRef(values.model);
    } catch {
      return {
        kind: "error",
        message: `--model must be org/repo[:QUANT][@revision], not "${values.model}"`,
      };
    }
  }
  if (values.config !== undefined && values.config.trim() === "")
    return { kind: "error", message: "--config must name a YAML file" };
  return {
    kind: "start",
    options: {
      nodes,
      port,
      dataDir: resolve(dataDir),
      verbose: values.verbose ?? false,
      ...(values.config !== undefined ? { configFile: resolve(values.config) } : {}),
      ...(model ? { model } : {}),
    },
  };
}
