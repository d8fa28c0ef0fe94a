// The body of a file response: reads [start, end] of a file in large pieces straight into a web
// ReadableStream, one read ahead of the socket, with no Node stream adapter in between.
import { open, type FileHandle } from "node:fs/promises";

/** Bytes per read, and per socket write of the response. */
export const FILE_READ_BYTES = 4 * 1024 * 1024;

/** What a file body reports as it goes. */
export interface BodyCounters {
  readonly onBytes: (n: number) => void;
  readonly onEnd?: (() => void) | undefined;
}

/**
 * A stream of bytes `start..end` (inclusive) of `source`: a path, opened on the first pull, or a file
 * already open (the body owns it from then on); closed at the end, on an error and when the consumer
 * cancels (client gone). `onBytes` counts what is read for the consumer (nothing read after a cancel
 * counts); `onEnd` is called once when the body is done with its file (ended, failed or cancelled).
 */
export function fileBody(
  source: string | FileHandle,
  { start, end }: { readonly start: number; readonly end: number },
  { onBytes, onEnd }: BodyCounters,
): ReadableStream<Uint8Array> {
  const path = typeof source === "string" ? source : "the file";
  let fh: FileHandle | undefined = typeof source === "string" ? undefined : source;
  let pos = start;
  let cancelled = false;
  let ended = false;
  const close = async () => {
    const f = fh;
    fh = undefined;
    try {
      await f?.close();
    } finally {
      if (!ended) {
        ended = true;
        onEnd?.();
      }
    }
  };
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          if (!fh) {
            // A handle given at the start is gone only once the body closed it.
            if (typeof source !== "string") return;
            const opened = await open(source, "r");
            // A cancel while the file was opening already ran close(): this handle is ours to close.
            if (cancelled) return void (await opened.close());
            fh = opened;
          }
          const want = Math.min(FILE_READ_BYTES, end + 1 - pos);
          const buf = Buffer.allocUnsafeSlow(want);
          let got = 0;
          while (got < want) {
            const f = fh;
            // The consumer left while this piece was read: nothing more is read or counted.
            if (cancelled || !f) return;
            const { bytesRead } = await f.read(buf, got, want - got, pos + got);
            if (bytesRead === 0) throw new Error(`${path} ended at byte ${pos + got}`);
            got += bytesRead;
          }
          if (cancelled) return;
          pos += got;
          onBytes(got);
          controller.enqueue(buf);
          if (pos > end) {
            await close();
            controller.close();
          }
        } catch (e) {
          await close().catch(() => undefined);
          if (!cancelled) controller.error(e);
        }
      },
      async cancel() {
        cancelled = true;
        await close();
      },
    },
    { highWaterMark: 1 },
  );
}
