import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import YAML from "yaml";
import { silentLogger } from "@ic/log";
import { Catalog, collision } from "./catalog.ts";
import type { NewCatalogEntry } from "./catalog.ts";
import { BUILTIN_CATALOG } from "./config.ts";
import { PublisherError } from "./errors.ts";

const entry = (over: Partial<NewCatalogEntry> = {}): NewCatalogEntry => ({
  key: "tiny-q4k",
  hf_repo: "q/Tiny-Q4K",
  output_name: "q--Tiny-Q4K",
  source_model: "a/Tiny",
  base_model: "a/Tiny",
  quant: "q4k",
  tier: "full",
  sidecar_repo: "q/Tiny-MTP",
  assistant_model_repo: null,
  ...over,
});

describe("Catalog", () => {
  let dir: string;
  let path: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "catalog-"));
    path = join(dir, "catalog.yaml");
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  const catalog = (): Catalog => new Catalog({ path, log: silentLogger() });

  it("ships a built-in catalog that loads", async () => {
    expect(await new Catalog({ path: BUILTIN_CATALOG, log: silentLogger() }).load()).toEqual([]);
  });

  it("appends blocks after the existing text, keeping comments, and finds one-to-many", async () => {
    await writeFile(
      path,
      "# my catalog\n- key: old\n  source_model: a/Other\n  note: hand written\n",
    );
    const c = catalog();
    const block = await c.append(entry());
    await c.append(
      entry({
        key: "tiny-es-q4k",
        hf_repo: "q/Tiny-es-Q4K",
        output_name: "q--Tiny-es-Q4K",
        tier: "expert-server",
      }),
    );
    const text = await readFile(path, "utf8");
    expect(text.startsWith("# my catalog\n- key: old\n")).toBe(true);
    expect(text).toContain(block);
    expect((await c.find("A/TINY")).map((e) => e.key)).toEqual(["tiny-q4k", "tiny-es-q4k"]);
    expect((await c.find("a/Other"))[0]).toMatchObject({ key: "old", note: "hand written" });
    expect(await c.find("a/none")).toEqual([]);
  });

  it("rewrites a flow-style list instead of appending text that would not parse", async () => {
    await writeFile(path, "[]\n");
    await catalog().append(entry());
    expect(YAML.parse(await readFile(path, "utf8"))).toEqual([entry()]);
  });

  it.each([
    ["key", { key: "TINY-Q4K" }, /key "tiny-q4k"/i],
    ["hf_repo", { key: "x", hf_repo: "Q/tiny-q4k" }, /hf_repo/],
    ["output_name", { key: "x", hf_repo: "z/z", output_name: "q--Tiny-Q4K" }, /output_name/],
  ])("refuses a second entry with the same %s (409)", async (_f, over, message) => {
    await writeFile(path, "");
    const c = catalog();
    await c.append(entry());
    const err = await c.append(entry(over)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PublisherError);
    expect((err as PublisherError).code).toBe("conflict");
    expect((err as PublisherError).message).toMatch(message);
    expect(
      collision([entry()], entry({ key: "other", hf_repo: "o/o", output_name: "o--o" })),
    ).toBeNull();
  });

  it("serializes concurrent appends so exactly one of two clashing entries wins", async () => {
    await writeFile(path, "");
    const c = catalog();
    const both = await Promise.allSettled([
      c.append(entry({ key: "a", hf_repo: "a/a", output_name: "a" })),
      c.append(entry({ key: "a", hf_repo: "b/b", output_name: "b" })),
      c.append(entry()),
    ]);
    expect(both.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((await c.load()).map((e) => e.key)).toEqual(["a", "tiny-q4k"]);
  });

  it.each([
    ["missing", null, /failed to load: ENOENT/],
    ["not YAML", "key: [unclosed\n", /failed to load/],
    ["not a list", "key: value\n", /must be a YAML list/],
    ["an entry without key", "- hf_repo: a/b\n", /0\.key/],
  ])("reports a catalog that is %s as catalog_unavailable", async (_n, text, message) => {
    if (text !== null) await writeFile(path, text);
    const err = await catalog()
      .find("a/b")
      .catch((e: unknown) => e);
    expect((err as PublisherError).code).toBe("catalog_unavailable");
    expect((err as PublisherError).message).toMatch(message);
  });
});
