// The store host's file bodies: exact bytes of a range across several reads, a count of what was
// read, an error (not a short body that looks complete) when the file shrank, cancel closing it, and
// one end signal whichever way the body ends (the store host's count of open bodies).
import { describe, expect, it } from "vitest";
import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { FILE_READ_BYTES, fileBody } from "./file-body.ts";
import { tempDir } from "../test-support.ts";

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
    const got = await drain(fileBody(path, { start, end }, { onBytes: (n) => (counted += n) }));
    expect(got.equals(data.subarray(start, end + 1))).toBe(true);
    expect(counted).toBe(end + 1 - start);
  });

  it("errors when the file is shorter than the range", async () => {
    await using dir = await tempDir("body");
    const path = join(dir.path, "f.bin");
    // The file is shorter than the range asked (it shrank after the size was taken).
    await writeFile(path, randomBytes(50));
    const body = fileBody(path, { start: 0, end: 199 }, { onBytes: () => undefined });
    await expect(drain(body)).rejects.toThrow(/ended at byte 50/);
  });

  it("stops reading when the consumer cancels", async () => {
    await using dir = await tempDir("body");
    const path = join(dir.path, "f.bin");
    await writeFile(path, randomBytes(3 * FILE_READ_BYTES));
    let counted = 0;
    const reader = fileBody(
      path,
      { start: 0, end: 3 * FILE_READ_BYTES - 1 },
      { onBytes: (n) => (counted += n) },
    ).getReader();
    const first = await reader.read();
    expect(first.value?.length).toBe(FILE_READ_BYTES);
    await reader.cancel();
    // At most the one read ahead happened.
    expect(counted).toBeLessThanOrEqual(2 * FILE_READ_BYTES);
  });

  it("ends once whichever way it ends: read to the end, failed or cancelled", async () => {
    await using dir = await tempDir("body");
    const path = join(dir.path, "f.bin");
    await writeFile(path, randomBytes(FILE_READ_BYTES + 10));
    const ends = { done: 0, failed: 0, cancelled: 0 };
    await drain(
      fileBody(
        path,
        { start: 0, end: FILE_READ_BYTES + 9 },
        { onBytes: () => undefined, onEnd: () => ends.done++ },
      ),
    );
    await expect(
      drain(
        fileBody(
          path,
          { start: 0, end: 2 * FILE_READ_BYTES },
          { onBytes: () => undefined, onEnd: () => ends.failed++ },
        ),
      ),
    ).rejects.toThrow(/ended at byte/);
    // Cancelled half-way through a longer file (the read ahead cannot reach its end).
    const long = join(dir.path, "long.bin");
    await writeFile(long, randomBytes(3 * FILE_READ_BYTES));
    let counted = 0;
    const reader = fileBody(
      long,
      { start: 0, end: 3 * FILE_READ_BYTES - 1 },
      { onBytes: (n) => (counted += n), onEnd: () => ends.cancelled++ },
    ).getReader();
    await reader.read();
    await reader.cancel();
    await reader.cancel();
    expect(counted).toBeLessThan(3 * FILE_READ_BYTES);
    expect(ends).toEqual({ done: 1, failed: 1, cancelled: 1 });
  });

  it("counts nothing read after the consumer left, and closes a file opened meanwhile", async () => {
    await using dir = await tempDir("body");
    const path = join(dir.path, "f.bin");
    await writeFile(path, randomBytes(FILE_READ_BYTES));
    let counted = 0;
    let ended = 0;
    const reader = fileBody(
      path,
      { start: 0, end: FILE_READ_BYTES - 1 },
      { onBytes: (n) => (counted += n), onEnd: () => ended++ },
    ).getReader();
    // The first read starts the pull (the file is still opening) and the consumer leaves at once.
    const read = reader.read();
    await reader.cancel();
    expect(await read).toEqual({ done: true, value: undefined });
    await new Promise((r) => setTimeout(r, 50));
    expect(counted).toBe(0);
    expect(ended).toBe(1);
  });
});
