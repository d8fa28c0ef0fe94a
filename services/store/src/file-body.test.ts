// The store host's file bodies: exact bytes of a range across several reads, a count of what was
// read, an error (not a short body that looks complete) when the file shrank, and cancel closing it.
import { describe, expect, it } from "vitest";
import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { FILE_READ_BYTES, fileBody } from "./file-body.ts";
import { tempDir } from "./test-support.ts";

async function drain(body: ReadableStream<Uint8Array>): Promise<Buffer> {
  const parts: Uint8Array[] = [];
  for await (const p of body) parts.push(p);
  return Buffer.concat(parts);
}

describe("file bodies", () => {
  it("streams an inclusive range spanning several reads, counting every byte", async () => {
    await using dir = await tempDir("body");
    const data = randomBytes(2 * FILE_READ_BYTES + 1000);
    const path = join(dir.path, "f.bin");
    await writeFile(path, data);
    let counted = 0;
    const start = 17;
    const end = data.length - 3;
    const got = await drain(fileBody(path, start, end, (n) => (counted += n)));
    expect(got.equals(data.subarray(start, end + 1))).toBe(true);
    expect(counted).toBe(end + 1 - start);
  });

  it("errors when the file is shorter than the range", async () => {
    await using dir = await tempDir("body");
    const path = join(dir.path, "f.bin");
    // The file is shorter than the range asked (it shrank after the size was taken).
    await writeFile(path, randomBytes(50));
    const body = fileBody(path, 0, 199, () => undefined);
    await expect(drain(body)).rejects.toThrow(/ended at byte 50/);
  });

  it("stops reading when the consumer cancels", async () => {
    await using dir = await tempDir("body");
    const path = join(dir.path, "f.bin");
    await writeFile(path, randomBytes(3 * FILE_READ_BYTES));
    let counted = 0;
    const reader = fileBody(path, 0, 3 * FILE_READ_BYTES - 1, (n) => (counted += n)).getReader();
    const first = await reader.read();
    expect(first.value?.length).toBe(FILE_READ_BYTES);
    await reader.cancel();
    // At most the one read ahead happened.
    expect(counted).toBeLessThanOrEqual(2 * FILE_READ_BYTES);
  });
});
