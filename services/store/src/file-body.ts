// The body of a file response: reads [start, end] of a file in large pieces straight into a web
// ReadableStream, one read ahead of the socket, with no Node stream adapter in between.
import { open } from "node:fs/promises";

/** Bytes per read, and per socket write of the response. */
export const FILE_READ_BYTES = 4 * 1024 * 1024;

/**
 * A stream of bytes `start..end` (inclusive) of `path`; the file is opened on the first pull and closed
 * at the end, on an error and when the consumer cancels (client gone). `onBytes` counts what is read.
 */
export function fileBody(
  path: string,
  start: number,
  end: number,
  onBytes: (n: number) => void,
): ReadableStream<Uint8Array> {
  let fh: Awaited<ReturnType<typeof open>> | undefined;
  let pos = start;
  const close = async () => {
    const f = fh;
    fh = undefined;
    await f?.close();
  };
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          fh ??= await open(path, "r");
          const want = Math.min(FILE_READ_BYTES, end + 1 - pos);
          const buf = Buffer.allocUnsafeSlow(want);
          let got = 0;
          while (got < want) {
            const { bytesRead } = await fh.read(buf, got, want - got, pos + got);
            if (bytesRead === 0) throw new Error(`${path} ended at byte ${pos + got}`);
            got += bytesRead;
          }
          pos += got;
          onBytes(got);
          controller.enqueue(buf);
          if (pos > end) {
            await close();
            controller.close();
          }
        } catch (e) {
          await close().catch(() => undefined);
          controller.error(e);
        }
      },
      async cancel() {
        await close();
      },
    },
    { highWaterMark: 1 },
  );
}
