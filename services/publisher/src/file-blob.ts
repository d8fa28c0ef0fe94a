// A Blob over a byte range of a file on disk whose stream() reads only when the consumer pulls.
// Uploads of multi-GB sidecars stay flat in memory however many parts are in flight.
import { open, stat } from "node:fs/promises";
import type { FileHandle } from "node:fs/promises";

const CHUNK = 64 * 1024;

export class FileSliceBlob extends Blob {
  static async open(path: string): Promise<FileSliceBlob> {
    const { size } = await stat(path);
    return new FileSliceBlob(path, 0, size);
  }

  // Own properties shadow Blob's accessors, which would report the empty native blob.
  override readonly size: number;
  override readonly type = "";

  private constructor(
    readonly path: string,
    private readonly start: number,
    private readonly end: number,
  ) {
    super([]);
    this.size = end - start;
  }

  /** Same semantics as Blob.slice, negative offsets included. */
  override slice(start = 0, end = this.size): FileSliceBlob {
    const clamp = (v: number): number =>
      Math.min(this.size, Math.max(0, v < 0 ? this.size + v : v));
    const s = clamp(start);
    const e = Math.max(s, clamp(end));
    return new FileSliceBlob(this.path, this.start + s, this.start + e);
  }

  override async arrayBuffer(): Promise<ArrayBuffer> {
    const buf = new Uint8Array(this.size);
    const fh = await open(this.path, "r");
    try {
      let done = 0;
      while (done < buf.byteLength) {
        const { bytesRead } = await fh.read(buf, done, buf.byteLength - done, this.start + done);
        if (bytesRead === 0) throw new Error(`${this.path} is shorter than expected`);
        done += bytesRead;
      }
    } finally {
      await fh.close();
    }
    return buf.buffer;
  }

  override async text(): Promise<string> {
    return new TextDecoder().decode(await this.arrayBuffer());
  }

  override stream(): ReadableStream<Uint8Array<ArrayBuffer>> {
    const { path, end } = this;
    let pos = this.start;
    let fh: FileHandle | null = null;
    return new ReadableStream<Uint8Array<ArrayBuffer>>(
      {
        async pull(controller) {
          fh ??= await open(path, "r");
          const n = Math.min(CHUNK, end - pos);
          if (n <= 0) {
            await fh.close();
            controller.close();
            return;
          }
          const buf = new Uint8Array(n);
          const { bytesRead } = await fh.read(buf, 0, n, pos);
          if (bytesRead === 0) {
            await fh.close();
            controller.error(new Error(`${path} is shorter than expected`));
            return;
          }
          pos += bytesRead;
          controller.enqueue(bytesRead === n ? buf : buf.slice(0, bytesRead));
        },
        async cancel() {
          await fh?.close();
        },
      },
      { highWaterMark: 0 },
    );
  }
}
