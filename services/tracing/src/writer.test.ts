// The writer thread: files land complete under their names (no temp file left), a removed dir is
// recreated, a failing write is reported per item, and a dead worker is replaced on the next write.
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { TraceWriter } from "./writer.ts";

let dir: string;
let writer: TraceWriter;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "trace-writer-"));
  writer = new TraceWriter(dir);
});

afterEach(async () => {
  await writer.stop();
  await rm(dir, { recursive: true, force: true });
});

describe("TraceWriter", () => {
  it("writes a batch of files and leaves no temporary file", async () => {
    const results = await writer.write([
      { name: "1_t-a.json", data: '{"a":1}' },
      { name: "2_t-b.json", data: '{"b":2}' },
    ]);
    expect(results).toEqual([
      { name: "1_t-a.json", ok: true },
      { name: "2_t-b.json", ok: true },
    ]);
    expect((await readdir(dir)).sort()).toEqual(["1_t-a.json", "2_t-b.json"]);
    expect(await readFile(join(dir, "2_t-b.json"), "utf8")).toBe('{"b":2}');
  });

  it("recreates a dir removed under it, and reports a write that cannot succeed", async () => {
    await rm(dir, { recursive: true });
    expect(await writer.write([{ name: "1_t-a.json", data: "{}" }])).toEqual([
      { name: "1_t-a.json", ok: true },
    ]);
    // A directory where the file should go: the rename fails, the temp file is cleaned up.
    await rm(join(dir, "1_t-a.json"));
    await writeFile(join(dir, "keep"), "");
    await (await import("node:fs/promises")).mkdir(join(dir, "2_t-b.json"));
    const [r] = await writer.write([{ name: "2_t-b.json", data: "{}" }]);
    expect(r).toMatchObject({ name: "2_t-b.json", ok: false });
    expect((await readdir(dir)).sort()).toEqual(["2_t-b.json", "keep"]);
  });

  it("starts a new worker after the old one was stopped", async () => {
    await writer.write([{ name: "1_t-a.json", data: "{}" }]);
    await writer.stop();
    expect(await writer.write([{ name: "2_t-b.json", data: "{}" }])).toEqual([
      { name: "2_t-b.json", ok: true },
    ]);
  });
});
