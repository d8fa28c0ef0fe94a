// The built-in catalog: a YAML list of entries, reverse-looked-up by source model and appended to
// by registration. Appends are serialized, collision-checked and written atomically (temp + rename).
import { readFile, rename, stat, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import YAML from "yaml";
import { z } from "zod";
import type { Logger } from "@ic/log";
import { errorMessage, PublisherError } from "./errors.ts";

/** One catalog entry; unknown fields of hand-written entries are kept as they are. */
export const CatalogEntrySchema = z.looseObject({
  key: z.string().min(1),
  hf_repo: z.string().optional(),
  output_name: z.string().optional(),
  source_model: z.string().optional(),
  base_model: z.string().optional(),
  quant: z.string().optional(),
  tier: z.string().optional(),
  sidecar_repo: z.string().nullable().optional(),
  assistant_model_repo: z.string().nullable().optional(),
});
export type CatalogEntry = z.infer<typeof CatalogEntrySchema>;

/** What registration writes: every field present. */
export interface NewCatalogEntry {
  readonly key: string;
  readonly hf_repo: string;
  readonly output_name: string;
  readonly source_model: string;
  readonly base_model: string;
  readonly quant: string;
  readonly tier: string;
  readonly sidecar_repo: string | null;
  readonly assistant_model_repo: string | null;
}

const CatalogFileSchema = z.array(CatalogEntrySchema).nullable();

function same(a: string | undefined | null, b: string): boolean {
  return typeof a === "string" && a.toLowerCase() === b.toLowerCase();
}

/** YAML text of one entry as a list item, the block appended to the file. */
export function entryBlock(entry: NewCatalogEntry): string {
  return YAML.stringify([entry], { lineWidth: 0 });
}

/** Which unique field of `entry` already exists in `entries`, or null. Pure. */
export function collision(
  entries: ReadonlyArray<Pick<CatalogEntry, "key" | "hf_repo" | "output_name">>,
  entry: NewCatalogEntry,
): string | null {
  for (const e of entries) {
    if (same(e.key, entry.key)) return `catalog already has an entry with key "${entry.key}"`;
    if (same(e.hf_repo, entry.hf_repo))
      return `catalog already has an entry for hf_repo "${entry.hf_repo}" (key "${e.key}")`;
    if (same(e.output_name, entry.output_name)) {
      return `catalog already has an entry with output_name "${entry.output_name}" (key "${e.key}")`;
    }
  }
  return null;
}

export interface CatalogOptions {
  readonly path: string;
  readonly log: Logger;
}

export class Catalog {
  private readonly log: Logger;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly o: CatalogOptions) {
    this.log = o.log.child({ component: "catalog" });
  }

  get path(): string {
    return this.o.path;
  }

  private parse(text: string): CatalogEntry[] {
    const doc = YAML.parseDocument(text);
    if (doc.errors.length > 0) throw new Error(doc.errors[0]?.message ?? "invalid YAML");
    const parsed = CatalogFileSchema.safeParse(doc.toJS());
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new Error(
        `${issue?.path.join(".") || "(root)"}: ${issue?.message ?? "invalid"} (the file must be a YAML list of entries)`,
      );
    }
    return parsed.data ?? [];
  }

  private async read(): Promise<{ text: string; entries: CatalogEntry[] }> {
    try {
      const text = await readFile(this.o.path, "utf8");
      return { text, entries: this.parse(text) };
    } catch (err) {
      throw new PublisherError(
        "catalog_unavailable",
        `catalog ${this.o.path} failed to load: ${errorMessage(err)}`,
        {
          cause: err,
        },
      );
    }
  }

  async load(): Promise<CatalogEntry[]> {
    return (await this.read()).entries;
  }

  /** Entries whose source_model or base_model is `model` (case-insensitive); many may match. */
  async find(model: string): Promise<CatalogEntry[]> {
    const entries = await this.load();
    return entries.filter((e) => same(e.source_model, model) || same(e.base_model, model));
  }

  /** Appends the entry after a collision check; returns the YAML block written. */
  append(entry: NewCatalogEntry): Promise<string> {
    const run = this.queue.then(() => this.appendNow(entry));
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async appendNow(entry: NewCatalogEntry): Promise<string> {
    const { text, entries } = await this.read();
    const clash = collision(entries, entry);
    if (clash) throw new PublisherError("conflict", clash);
    const block = entryBlock(entry);
    let next = `${text}${text === "" || text.endsWith("\n") ? "" : "\n"}${block}`;
    let check: CatalogEntry[] | null = null;
    try {
      check = this.parse(next);
    } catch {
      check = null;
    }
    if (check?.length !== entries.length + 1 || check[check.length - 1]?.key !== entry.key) {
      // The file is not a plain block list (e.g. `[]` or flow style): rewrite it through the document model.
      const doc = YAML.parseDocument(text);
      if (!YAML.isSeq(doc.contents)) doc.contents = doc.createNode([]) as typeof doc.contents;
      (doc.contents as YAML.YAMLSeq).flow = false;
      (doc.contents as YAML.YAMLSeq).add(doc.createNode(entry));
      next = doc.toString({ lineWidth: 0 });
    }
    const mode = (await stat(this.o.path)).mode & 0o777;
    const tmp = join(dirname(this.o.path), `.catalog-${process.pid}-${Date.now()}.tmp`);
    await writeFile(tmp, next, { mode });
    await rename(tmp, this.o.path);
    this.log.info({ key: entry.key, hf_repo: entry.hf_repo }, "catalog entry appended");
    return block;
  }
}
