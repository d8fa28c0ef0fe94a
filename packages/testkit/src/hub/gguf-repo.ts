// A `*-GGUF` repo as the hub holds them: the same tiny model in several quantizations (real GGUFs
// llama-server loads), a README and a config, for pulls that must fetch one quantization only.
import { mkdtempSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { HubFileSource } from "./repo-store.ts";

export type TinyQuant = "F32" | "F16" | "Q8_0";

export interface GgufRepo {
  /** Files for HubEmulator.addRepo. */
  readonly files: Record<string, HubFileSource>;
  /** Bytes of each file, by path. */
  readonly bytes: ReadonlyMap<string, number>;
  /** The file name of each quantization. */
  readonly fileOf: (quant: TinyQuant) => string;
}

export async function tinyGgufRepo(
  quants: readonly TinyQuant[] = ["F32", "F16", "Q8_0"],
  name = "tiny-llama",
): Promise<GgufRepo> {
  const { writeTinyModel } = await import("@ic/gguf");
  const dir = mkdtempSync(join(tmpdir(), "ic-gguf-repo-"));
  const files: Record<string, HubFileSource> = {};
  const bytes = new Map<string, number>();
  const fileOf = (q: TinyQuant) => `${name}-${q}.gguf`;
  for (const q of quants) {
    const path = join(dir, fileOf(q));
    await writeTinyModel(path, { weightType: q });
    files[fileOf(q)] = { fromPath: path };
  }
  files["README.md"] = `# ${name} GGUF\n\nRandom weights in ${quants.join(", ")}.\n`;
  files["config.json"] = JSON.stringify({ architectures: ["LlamaForCausalLM"] });
  for (const [path, src] of Object.entries(files)) {
    const size =
      typeof src === "string"
        ? Buffer.byteLength(src)
        : src instanceof Uint8Array
          ? src.length
          : statSync(src.fromPath).size;
    bytes.set(path, size);
  }
  return { files, bytes, fileOf };
}
