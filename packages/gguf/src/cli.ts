// Command line for GGUF files: `write <path> [--drafter] [--layers N] [--seed N] [--f16] [--tools]`,
// `write-projector <path> [--text-embd N] [--seed N]` and `inspect <path> [--json]`.
// `npm start` uses `write` to generate the demo model; `write-projector` writes a tiny vision projector for it
// (llama-server's --mmproj); `inspect` prints the facts of any GGUF without reading weights.
import { parseArgs } from "node:util";
import { isGgufError } from "./errors.ts";
import { readGgufHeader } from "./reader.ts";
import { writeTinyModel } from "./tiny-model.ts";
import { writeTinyProjector } from "./tiny-projector.ts";

const USAGE = `usage:
  cli.ts write <path> [--drafter] [--layers N] [--seed N] [--f16] [--tools]
  cli.ts write-projector <path> [--text-embd N] [--seed N]
  cli.ts inspect <path> [--json]`;

function intFlag(value: string | undefined, flag: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isSafeInteger(n)) throw new Error(`${flag} must be an integer, got '${value}'`);
  return n;
}

async function main(argv: string[]): Promise<number> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      drafter: { type: "boolean", default: false },
      layers: { type: "string" },
      seed: { type: "string" },
      "text-embd": { type: "string" },
      f16: { type: "boolean", default: false },
      tools: { type: "boolean", default: false },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  const [command, path] = positionals;
  if (values.help || path === undefined || positionals.length !== 2) {
    console.error(USAGE);
    return values.help ? 0 : 2;
  }
  if (command === "write") {
    const nLayer = intFlag(values.layers, "--layers");
    const seed = intFlag(values.seed, "--seed");
    const model = await writeTinyModel(path, {
      drafter: values.drafter,
      weightType: values.f16 ? "F16" : "F32",
      tools: values.tools,
      ...(nLayer === undefined ? {} : { nLayer }),
      ...(seed === undefined ? {} : { seed }),
    });
    console.log(
      `wrote ${model.path} (${model.bytes} bytes, ${model.facts.blockCount} layers, vocab ${model.facts.vocabSize})`,
    );
    return 0;
  }
  if (command === "write-projector") {
    const textEmbd = intFlag(values["text-embd"], "--text-embd");
    const seed = intFlag(values.seed, "--seed");
    const projector = await writeTinyProjector(path, {
      ...(textEmbd === undefined ? {} : { textEmbd }),
      ...(seed === undefined ? {} : { seed }),
    });
    console.log(`wrote ${projector.path} (${projector.bytes} bytes, vision projector)`);
    return 0;
  }
  if (command === "inspect") {
    const header = await readGgufHeader(path, { keepArrayItemsUpTo: 64 });
    if (values.json) {
      console.log(
        JSON.stringify(
          { version: header.version, dataOffset: header.dataOffset, facts: header.facts },
          null,
          2,
        ),
      );
      return 0;
    }
    console.log(
      `GGUF v${header.version}, ${header.metadata.size} keys, ${header.tensors.length} tensors, data at ${header.dataOffset}`,
    );
    for (const [k, v] of Object.entries(header.facts)) console.log(`  ${k}: ${String(v)}`);
    return 0;
  }
  console.error(USAGE);
  return 2;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    console.error(isGgufError(e) ? `error (${e.code}): ${e.message}` : e);
    process.exitCode = 1;
  },
);
