// The seams the event log needs from its host: free space of the log's filesystem, the clock, and
// the append-only file handle, each with a real implementation and (for disk) a settable fake.
import { open, statfs } from "node:fs/promises";

export interface Disk {
  /** Bytes an unprivileged writer can still allocate on the filesystem holding `path`. */
  freeBytes(path: string): Promise<number>;
}

export const statfsDisk: Disk = {
  async freeBytes(path) {
    const s = await statfs(path);
    return s.bavail * s.bsize;
  },
};

/** A disk whose free space the test sets; `error` makes the next checks fail. */
export class FakeDisk implements Disk {
  checks = 0;
  error: Error | null = null;
  constructor(public free: number) {}
  freeBytes(_path: string): Promise<number> {
    this.checks++;
    return this.error ? Promise.reject(this.error) : Promise.resolve(this.free);
  }
}

/** An open append-only file: writes land at the end, in call order. */
export interface AppendHandle {
  /** Writes every byte (looping over short writes) or rejects; a rejection may leave a partial write. */
  append(data: Buffer): Promise<void>;
  /** Cuts the file back to `length` bytes (removes a partial write). */
  truncate(length: number): Promise<void>;
  close(): Promise<void>;
}

export interface EventFiles {
  openAppend(path: string): Promise<AppendHandle>;
}

export const nodeFiles: EventFiles = {
  async openAppend(path) {
    const fh = await open(path, "a");
    return {
      async append(data) {
        let off = 0;
        while (off < data.length) {
          const { bytesWritten } = await fh.write(data, off, data.length - off);
          off += bytesWritten;
        }
      },
      truncate: (length) => fh.truncate(length),
      close: () => fh.close(),
    };
  },
};
