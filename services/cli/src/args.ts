// Arguments of the ic command: `ic [global options] <verb> [verb options] [arguments]`, parsed with
// util.parseArgs (strict) against the verb's own options. Pure.
import { parseArgs } from "node:util";
import { INSTANCE_KIND_TABLE, INSTANCE_KINDS } from "@ic/protocol";

type Opt = { type: "string" | "boolean"; short?: string; help: string; value?: string };

const GLOBAL: Record<string, Opt> = {
  url: {
    type: "string",
    value: "URL",
    help: "a node's API (default $IC_URL, else http://127.0.0.1:8080)",
  },
  token: {
    type: "string",
    value: "TOKEN",
    help: "bearer token (default $IC_TOKEN); never printed",
  },
  "ca-file": {
    type: "string",
    value: "FILE",
    help: "the cluster CA (ca.crt) an https:// node's certificate is checked against (default $IC_CA_FILE)",
  },
  json: { type: "boolean", help: "machine-readable output" },
  help: { type: "boolean", short: "h", help: "help for the verb" },
  version: { type: "boolean", help: "the ic command's version" },
};

export interface Verb {
  readonly summary: string;
  readonly usage: string;
  readonly options: Record<string, Opt>;
  /** Positional arguments: [min, max]. */
  readonly positionals: readonly [number, number];
}

export const VERBS: Record<string, Verb> = {
  start: {
    summary: "start a local cluster (npm start); its options: ic start --help",
    usage: "start [options]",
    options: {},
    positionals: [0, 99],
  },
  status: {
    summary: "nodes, master, instances and health",
    usage: "status",
    options: {},
    positionals: [0, 0],
  },
  models: {
    summary: "registered models, and which are ready",
    usage: "models",
    options: {},
    positionals: [0, 0],
  },
  pull: {
    summary:
      "pull a model from the model hub into the store: one quantization (default Q4_K_M, else the smallest), with progress (Ctrl-C cancels)",
    usage: "pull <org/name>[:QUANT][@revision] [--detach]",
    options: { detach: { type: "boolean", help: "start the pull and return" } },
    positionals: [1, 1],
  },
  import: {
    summary:
      "send a GGUF file (or a folder of them) from this machine into the store as org/name; it registers like a copied model",
    usage: "import <file.gguf|folder> --as <org/name> [--place]",
    options: {
      as: { type: "string", value: "org/name", help: "the model id it is served as (required)" },
      place: { type: "boolean", help: "place an instance of it once registered" },
    },
    positionals: [1, 1],
  },
  pulls: {
    summary: "the store host's pulls; --dismiss takes a finished one off the list",
    usage: "pulls [--dismiss org/name]",
    options: {
      dismiss: {
        type: "string",
        help: "take a finished (failed, cancelled, done) pull off the list",
      },
    },
    positionals: [0, 0],
  },
  place: {
    summary: "place an instance of a model",
    usage:
      "place <org/name> [--min-nodes N] [--sharding Pipeline|Tensor] [--exclude NODE,...] [--replicas N] [--kind generate|embed|rerank] [--wait]",
    options: {
      wait: {
        type: "boolean",
        help: "wait until it serves (staging, loading), or say why it failed",
      },
      kind: {
        type: "string",
        value: "K",
        help: `what its instances serve: ${INSTANCE_KINDS.map((k) => `${k} (${INSTANCE_KIND_TABLE[k].serves})`).join(", ")}; default generate`,
      },
      embeddings: {
        type: "boolean",
        help: "the same as --kind embed (kept for scripts written before kinds)",
      },
      replicas: {
        type: "string",
        value: "N",
        help: "instances to keep, each on nodes the others do not use (default 1)",
      },
      "min-nodes": { type: "string", value: "N", help: "nodes to spread it over (default 1)" },
      sharding: { type: "string", value: "S", help: "Pipeline (default) or Tensor" },
      exclude: {
        type: "string",
        value: "NODES",
        help: "nodes to leave out, by name or id, comma-separated",
      },
    },
    positionals: [1, 1],
  },
  previews: {
    summary: "every placement of a model, with memory use or the refusal",
    usage: "previews <org/name> [--exclude NODE,...]",
    options: {
      exclude: { type: "string", value: "NODES", help: "nodes to leave out, by name or id" },
    },
    positionals: [1, 1],
  },
  rm: {
    summary: "delete an instance (and its deployment)",
    usage: "rm <instance_id>",
    options: {},
    positionals: [1, 1],
  },
  chat: {
    summary: "chat with a model, streaming the answer",
    usage: "chat <org/name> [message...] [--max-tokens N] [--temperature T] [--image FILE|URL]",
    options: {
      image: {
        type: "string",
        value: "FILE|URL",
        help: "an image for a model with a projector: a file (sent inline) or an http(s) URL (the cluster fetches it when chat.fetch_image_urls is on)",
      },
      "max-tokens": { type: "string", value: "N", help: "tokens to generate (default 256)" },
      temperature: {
        type: "string",
        value: "T",
        help: "sampling temperature 0-2 (default: the engine's)",
      },
    },
    positionals: [1, 99],
  },
  logs: {
    summary: "a node's log lines, or a runner's with --instance",
    usage: "logs [--node NAME] [--tail N] [--level L] [-f] [--instance ID [--rank R]]",
    options: {
      node: {
        type: "string",
        value: "NAME",
        help: "another node's log, by name or id (default: the node --url names)",
      },
      tail: { type: "string", value: "N", help: "lines (default 50)" },
      follow: {
        type: "boolean",
        short: "f",
        help: "node logs: keep printing new lines until Ctrl-C",
      },
      level: { type: "string", value: "L", help: "node logs: this level and above" },
      instance: { type: "string", value: "ID", help: "a runner's log instead" },
      rank: { type: "string", value: "R", help: "the runner's rank (default 0)" },
    },
    positionals: [0, 0],
  },
  storage: {
    summary: "storage of every node",
    usage: "storage [--node NAME]",
    options: { node: { type: "string", value: "NAME", help: "only this node, by name or id" } },
    positionals: [0, 0],
  },
  purge: {
    summary: "purge staged copies not in use, on every node",
    usage: "purge [--model org/name]",
    options: { model: { type: "string", value: "ID", help: "only this model's copies" } },
    positionals: [0, 0],
  },
  traces: {
    summary: "saved traces, or one trace's stats",
    usage: "traces [task_id] [--limit N]",
    options: { limit: { type: "string", value: "N", help: "how many (default 20)" } },
    positionals: [0, 1],
  },
  doctor: {
    summary: "the health checklist: says what to fix, exits 1 when a check fails",
    usage: "doctor [--expect-nodes N]",
    options: {
      "expect-nodes": {
        type: "string",
        value: "N",
        help: "the machine count the session must have",
      },
    },
    positionals: [0, 0],
  },
};

export interface Parsed {
  readonly verb: string;
  readonly url: string;
  readonly token: string | undefined;
  /** The cluster CA file to trust for https:// nodes. */
  readonly caFile: string | undefined;
  readonly json: boolean;
  readonly help: boolean;
  /** `--version` (before any verb): print the version and stop. */
  readonly version: boolean;
  readonly values: Readonly<Record<string, string | boolean | undefined>>;
  readonly positionals: readonly string[];
  /** `start`: everything after the verb, untouched. */
  readonly rest: readonly string[];
}

export class UsageError extends Error {
  override name = "UsageError";
}

const opts = (o: Record<string, Opt>) =>
  Object.fromEntries(
    Object.entries(o).map(([k, v]) => [
      k,
      { type: v.type, ...(v.short ? { short: v.short } : {}) },
    ]),
  );

export function parse(
  argv: readonly string[],
  env: Readonly<Record<string, string | undefined>>,
): Parsed {
  let i = -1;
  for (let k = 0; k < argv.length; k++) {
    const a = argv[k]!;
    if (a === "--url" || a === "--token") k++;
    else if (!a.startsWith("-")) {
      i = k;
      break;
    }
  }
  const verb = i >= 0 ? argv[i]! : undefined;
  const before = i >= 0 ? argv.slice(0, i) : [...argv];
  const after = i >= 0 ? argv.slice(i + 1) : [];
  const spec = verb === undefined ? undefined : VERBS[verb];
  if (verb !== undefined && !spec)
    throw new UsageError(`unknown verb "${verb}" (ic --help lists them)`);
  let values: Record<string, string | boolean | undefined>;
  let positionals: string[] = [];
  try {
    const g = parseArgs({
      args: before,
      options: opts(GLOBAL),
      strict: true,
      allowPositionals: false,
    });
    values = { ...g.values };
    if (spec && verb !== "start") {
      const v = parseArgs({
        args: [...after],
        options: opts({ ...GLOBAL, ...spec.options }),
        strict: true,
        allowPositionals: true,
      });
      values = { ...values, ...v.values };
      positionals = v.positionals;
    }
  } catch (e) {
    throw new UsageError((e instanceof Error ? e.message : String(e)).split(". To specify")[0]!);
  }
  const version = values["version"] === true && verb === undefined;
  const help = values["help"] === true || (verb === undefined && !version);
  if (spec && !help && verb !== "start") {
    const [min, max] = spec.positionals;
    if (positionals.length < min || positionals.length > max)
      throw new UsageError(`usage: ic ${spec.usage}`);
  }
  return {
    verb: verb ?? "",
    url: (values["url"] as string | undefined) ?? env["IC_URL"] ?? "http://127.0.0.1:8080",
    token: (values["token"] as string | undefined) ?? env["IC_TOKEN"],
    caFile: (values["ca-file"] as string | undefined) ?? (env["IC_CA_FILE"] || undefined),
    json: values["json"] === true,
    help,
    version,
    values,
    positionals,
    rest: verb === "start" ? after : [],
  };
}

/** The whole numbers an option accepts, from min to max, and its value when it is not given. */
export interface IntBounds {
  min: number;
  max: number;
  fallback: number;
}

/** A whole number within bounds, from an option's text. */
export function intOption(name: string, raw: unknown, { min, max, fallback }: IntBounds): number {
  if (raw === undefined) return fallback;
  if (typeof raw !== "string" || !/^\d+$/.test(raw))
    throw new UsageError(`--${name} must be a whole number, not "${String(raw)}"`);
  const n = Number(raw);
  if (n < min || n > max) throw new UsageError(`--${name} must be between ${min} and ${max}`);
  return n;
}

export function helpText(verb?: string): string {
  const g = Object.entries(GLOBAL).map(
    ([k, o]) =>
      `  --${k}${o.value ? ` ${o.value}` : ""}${o.short ? `, -${o.short}` : ""}`.padEnd(24) +
      o.help,
  );
  const spec = verb ? VERBS[verb] : undefined;
  if (spec) {
    const own = Object.entries(spec.options).map(
      ([k, o]) => `  --${k}${o.value ? ` ${o.value}` : ""}`.padEnd(24) + o.help,
    );
    return [
      `Usage: ic ${spec.usage}`,
      "",
      spec.summary,
      ...(own.length ? ["", "Options:", ...own] : []),
      "",
      "Global options:",
      ...g,
    ].join("\n");
  }
  const verbs = Object.entries(VERBS).map(([k, v]) => `  ${k.padEnd(10)}${v.summary}`);
  return [
    "Usage: ic [global options] <verb> [options]",
    "",
    "Verbs:",
    ...verbs,
    "",
    "Global options:",
    ...g,
    "",
    "Exit codes: 0 done, 1 the API refused or a doctor check failed, 2 usage error.",
  ].join("\n");
}
