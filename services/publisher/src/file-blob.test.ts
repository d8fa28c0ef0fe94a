import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FileSliceBlob } from "./file-blob.ts";

describe("FileSliceBlob", () => {
  let dir: string;
  let path: string;
  const data = randomBytes(200_000);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "file-blob-"));
    path = join(dir, "f.bin");
    await writeFile(path, data);
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const collect = async (s: ReadableStream<Uint8Array>): Promise<Buffer> => {
    const parts: Uint8Array[] = [];
    for await (const c of s as unknown as AsyncIterable<Uint8Array>) parts.push(c);
    return Buffer.concat(parts);
  };

  it("is a Blob with the file's size whose slices read exactly their bytes", async () => {
    const blob = await FileSliceBlob.open(path);
    expect(blob).toBeInstanceOf(Blob);
    expect(blob.size).toBe(data.length);
    const slice = blob.slice(70_000, 140_123);
    expect(slice.size).toBe(70_123);
    expect(await collect(slice.stream())).toEqual(data.subarray(70_000, 140_123));
    expect(Buffer.from(await slice.slice(5, 10).arrayBuffer())).toEqual(
      data.subarray(70_005, 70_010),
    );
    expect(blob.slice(-10).size).toBe(10);
    expect(blob.slice(10, 5).size).toBe(0);
    expect(await collect(blob.stream())).toEqual(data);
  });

  it("streams in 64 KiB chunks and can be cancelled midway", async () => {
    const reader = (await FileSliceBlob.open(path)).stream().getReader();
    const first = await reader.read();
    expect(first.value?.byteLength).toBe(64 * 1024);
    await reader.cancel();
  });
});
