// A file fetched piece by piece from several sources at once (the store host and peers holding it),
// each piece checked against the store host's manifest before it counts.
//
// Invariants: a piece counts (for the copy, for peers asking, for resume) only once its bytes hashed
// to the manifest's sha256 and were written; a piece that fails its hash is fetched again from
// another source, and the peer that sent it gets nothing more for this copy; the partial is the
// file's full size (sparse) beside a sidecar listing the verified pieces, written only after a
// datasync covered them, and a resume hashes each listed piece again before it counts (a partial
// changed on disk is caught); the file is renamed into place once every piece is verified and the
// partial fsynced. Which piece comes from where is piece-plan.ts's decision.
import { mkdir, open, readFile, rename, rm, stat, type FileHandle } from "node:fs/promises";
import { dirname } from "node:path";
import { pieceCount, type FilePieces } from "@ic/protocol";
import { isErrno, partFile, writeJsonAtomic } from "../paths.ts";
import { PieceSet, pieceRange } from "../pieces.ts";
import type { DirectSink } from "./direct-get.ts";
import { pickPiece, pieceOrder, type SourceView } from "./piece-plan.ts";
import { pieceHasher, sharedWriteWorker, type SlabWorker, type WriteJob } from "./slab-worker.ts";
import { discard, errText, pullWeb, TransferError, type OpenedStream } from "./transfer.ts";

/** A file with the store host's piece hashes. */
export interface PieceFile {
  readonly path: string;
  readonly bytes: number;
  readonly sha256: string;
  readonly pieces: FilePieces;
}

/** Where pieces come from: the store host (every piece) or a peer (what it verified so far). */
export interface PieceSource {
  readonly id: string;
  readonly kind: "store" | "peer";
  /** The pieces of a file it can serve now. */
  has(file: PieceFile): PieceSet | "all" | undefined;
  /** A peer: the pieces of a file it is fetching from the store host now. */
  fetching?(file: PieceFile): PieceSet | undefined;
  /** Told when it sent a piece whose hash is wrong (a peer is then not asked again for this copy). */
  distrust?(): void;
  /** Opens bytes [start, end] (inclusive) of the file; throws when it cannot serve them. */
  get(
    file: PieceFile,
    start: number,
    end: number,
    signal: AbortSignal,
  ): Promise<OpenedStream["body"]>;
}

export interface PieceFetchOutcome {
  readonly sha256: string;
  /** Bytes fetched by this call, from any source. */
  readonly fetchedBytes: number;
  /** Of those, bytes that came from peers. */
  readonly peerBytes: number;
  /** Bytes of verified pieces found in the partial. */
  readonly resumedBytes: number;
}

/** Requests at once per copy, and buffers of one piece each. */
const PIECE_REQUESTS = 4;
/** Requests at once to one peer. */
const PEER_SLOTS = 2;
/**
 * Requests at once to the store host while peers are known: one, so that copies staged together
 * take different pieces from it and the rest from each other (alone, PIECE_REQUESTS).
 */
const STORE_SLOTS_WITH_PEERS = 1;
/** A source whose request failed waits this long; a peer that sent a bad piece, till the end. */
const COOL_MS = 1000;
/** The store host failing this many requests in a row, with no piece verified between, ends the try. */
const STORE_FAILURES = 5;
/** Bad pieces from the store host itself before the transfer fails as an integrity error. */
const STORE_BAD_PIECES = 2;
/** The sidecar is rewritten after this many newly verified bytes. */
const PERSIST_BYTES = 64 * 1024 * 1024;
/** How often the loop looks again when it waits for nothing in particular (new peers, cooling). */
const TICK_MS = 200;

/** The sidecar of a piece partial: `.<name>.part.pieces`. */
export function piecesFile(finalPath: string): string {
  return `${partFile(finalPath)}.pieces`;
}

interface Sidecar {
  readonly version: 1;
  readonly sha256: string;
  readonly bytes: number;
  readonly piece_bytes: number;
  readonly have: string;
}

async function readSidecar(finalPath: string): Promise<Sidecar | null> {
  try {
    const v = JSON.parse(await readFile(piecesFile(finalPath), "utf8")) as Partial<Sidecar>;
    if (
      v.version !== 1 ||
      typeof v.sha256 !== "string" ||
      typeof v.have !== "string" ||
      !Number.isSafeInteger(v.bytes) ||
      !Number.isSafeInteger(v.piece_bytes) ||
      (v.piece_bytes ?? 0) <= 0
    )
      return null;
    return v as Sidecar;
  } catch (e) {
    if (isErrno(e, "ENOENT") || e instanceof SyntaxError) return null;
    throw e;
  }
}

/**
 * Bytes of a file's partial that a next attempt keeps: the verified pieces a sidecar lists, else the
 * partial's length (a prefix, as whole-file transfers leave it); 0 without a partial.
 */
export async function keptPartialBytes(finalPath: string): Promise<number> {
  const side = await readSidecar(finalPath);
  if (side) {
    const n = pieceCount(side.bytes, side.piece_bytes);
    const set = PieceSet.fromBase64(side.have, n);
    if (!set) return 0;
    let sum = 0;
    for (let i = 0; i < n; i++) {
      if (!set.has(i)) continue;
      const [a, b] = pieceRange(side.bytes, side.piece_bytes, i);
      sum += b - a;
    }
    return sum;
  }
  try {
    return (await stat(partFile(finalPath))).size;
  } catch (e) {
    if (isErrno(e, "ENOENT")) return 0;
    throw e;
  }
}

/** Removes a piece partial (partial and sidecar), for a transfer that cannot use it. */
export async function dropPiecePartial(finalPath: string): Promise<boolean> {
  if ((await readSidecar(finalPath)) === null) return false;
  await rm(partFile(finalPath), { force: true });
  await rm(piecesFile(finalPath), { force: true });
  return true;
}

/**
 * The pieces a partial already holds, each hashed again (on the piece threads, in parallel) before it
 * counts: those its sidecar lists when it describes this file, or, for a prefix left by a whole-file
 * transfer, the pieces inside the prefix. A partial changed on disk since is caught here.
 */
async function resumeSet(finalPath: string, file: PieceFile, n: number): Promise<PieceSet> {
  const side = await readSidecar(finalPath);
  let size: number;
  try {
    size = (await stat(partFile(finalPath))).size;
  } catch (e) {
    if (isErrno(e, "ENOENT")) return new PieceSet(n);
    throw e;
  }
  let candidates: PieceSet | null;
  if (side) {
    const same =
      side.sha256 === file.sha256 &&
      side.bytes === file.bytes &&
      side.piece_bytes === file.pieces.bytes &&
      size === file.bytes;
    candidates = same ? PieceSet.fromBase64(side.have, n) : null;
  } else {
    candidates = new PieceSet(n);
    for (let i = 0; i < n && pieceRange(file.bytes, file.pieces.bytes, i)[1] <= size; i++)
      candidates.add(i);
  }
  const set = new PieceSet(n);
  if (!candidates) return set;
  const part = partFile(finalPath);
  const checks: Promise<void>[] = [];
  for (let i = 0; i < n; i++) {
    if (!candidates.has(i)) continue;
    const [a, b] = pieceRange(file.bytes, file.pieces.bytes, i);
    checks.push(
      pieceHasher()
        .hashRange(part, a, b - a)
        .then((h) => {
          if (h === file.pieces.sha256[i]) set.add(i);
        }),
    );
  }
  try {
    await Promise.all(checks);
  } catch (e) {
    throw new TransferError("transfer", `cannot read ${part}: ${errText(e)}`, { cause: e });
  }
  return set;
}

/** Reads a body of exactly `view.length` bytes into `view`. */
async function readInto(
  body: OpenedStream["body"],
  view: Uint8Array,
  signal: AbortSignal,
  onBytes: (n: number) => void,
): Promise<void> {
  let filled = 0;
  const take = (chunk: Uint8Array) => {
    if (filled + chunk.length > view.length) throw new Error("source sent more than the piece");
    view.set(chunk, filled);
    filled += chunk.length;
    onBytes(chunk.length);
  };
  if ("getReader" in body) {
    await pullWeb(body, signal, (chunk) => {
      take(chunk);
      return undefined;
    });
  } else {
    if (body.length !== view.length) {
      body.cancel();
      throw new Error(`source announced ${body.length} bytes for a piece of ${view.length}`);
    }
    const sink: DirectSink = {
      space: () => (filled < view.length ? view.subarray(filled) : undefined),
      commit: (n) => {
        filled += n;
        onBytes(n);
      },
      push: (chunk) => {
        take(chunk);
        return undefined;
      },
      ready: () => Promise.resolve(),
    };
    await body.run(sink, signal);
  }
  if (signal.aborted) throw signal.reason;
  if (filled !== view.length) throw new Error(`short piece: ${filled} of ${view.length} bytes`);
}

interface SourceState {
  inflight: number;
  coolUntilMs: number;
  banned: boolean;
}

/**
 * Fetches `file` into `finalPath` through its piece partial. `sources` is asked again at each
 * decision (peers come and go); `seed` orders this copy's pieces. On abort, a failure or a stall the
 * verified pieces stay for the next attempt.
 */
export async function fetchPieces(args: {
  readonly finalPath: string;
  readonly file: PieceFile;
  readonly sources: () => readonly PieceSource[];
  readonly seed: string;
  /**
   * True while other nodes may serve pieces (they are asked, even if they hold nothing yet): the
   * store host then gets fewer requests at once. Default: while some source is a peer with pieces.
   */
  readonly peersKnown?: (() => boolean) | undefined;
  readonly signal: AbortSignal;
  /** No byte from any source for this long fails the try (the partial kept). */
  readonly idleTimeoutMs: number;
  /** Verified bytes, as each piece counts. */
  readonly onBytes?: ((n: number) => void) | undefined;
  /** Bytes received, by kind of source, as each piece arrives (a bad piece counts too). */
  readonly onReceived?: ((from: "store" | "peer", n: number) => void) | undefined;
  /**
   * The live set of verified pieces and the partial's path, once known (what peers may ask for), and
   * the live set of pieces being fetched from the store host (what peers leave to this copy).
   */
  readonly onPieces?: ((set: PieceSet, partPath: string, fromStore: PieceSet) => void) | undefined;
  readonly writer?: SlabWorker | undefined;
}): Promise<PieceFetchOutcome> {
  const { file, finalPath } = args;
  const pb = file.pieces.bytes;
  const n = pieceCount(file.bytes, pb);
  const part = partFile(finalPath);
  await mkdir(dirname(finalPath), { recursive: true });
  const done = await resumeSet(finalPath, file, n);
  let resumedBytes = 0;
  for (let i = 0; i < n; i++) {
    if (!done.has(i)) continue;
    const [a, b] = pieceRange(file.bytes, pb, i);
    resumedBytes += b - a;
  }
  let fh: FileHandle;
  try {
    fh = await open(part, done.count > 0 ? "r+" : "w");
    await fh.truncate(file.bytes);
  } catch (e) {
    throw new TransferError("transfer", `cannot open ${part}: ${errText(e)}`, { cause: e });
  }
  const run = new PieceRun(args, fh, done, n);
  args.onPieces?.(done, part, run.fromStore);
  try {
    await run.loop();
  } catch (e) {
    await run.settle();
    await run.persist().catch(() => undefined);
    await fh.close().catch(() => undefined);
    if (e instanceof TransferError) throw e;
    if (args.signal.aborted)
      throw new TransferError("aborted", `transfer of ${file.path} aborted`, { cause: e });
    throw new TransferError("transfer", `transfer of ${file.path} failed: ${errText(e)}`, {
      cause: e,
    });
  }
  try {
    await fh.sync();
  } catch (e) {
    await fh.close().catch(() => undefined);
    throw new TransferError("transfer", `cannot fsync ${part}: ${errText(e)}`, { cause: e });
  }
  await fh.close();
  await rename(part, finalPath);
  await rm(piecesFile(finalPath), { force: true });
  return {
    sha256: file.sha256,
    fetchedBytes: run.fetchedBytes,
    peerBytes: run.peerBytes,
    resumedBytes,
  };
}

/** One try of a piece transfer: its requests, buffers, sources' state and the sidecar. */
class PieceRun {
  fetchedBytes = 0;
  peerBytes = 0;
  /** Pieces being fetched from the store host now. */
  readonly fromStore: PieceSet;
  private readonly inflight = new Map<number, Promise<void>>();
  private readonly states = new Map<string, SourceState>();
  private readonly buffers: Buffer[] = [];
  private readonly writes: WriteJob;
  private readonly local = new AbortController();
  private readonly signal: AbortSignal;
  private readonly order: number[];
  private fatal: { error: unknown } | undefined;
  private storeFailures = 0;
  private storeBad = 0;
  private lastError = "";
  private lastByteMs = Date.now();
  private unpersisted = 0;
  private persisting: Promise<void> | undefined;
  private wake: (() => void) | undefined;

  constructor(
    private readonly a: Parameters<typeof fetchPieces>[0],
    private readonly fh: FileHandle,
    private readonly done: PieceSet,
    n: number,
  ) {
    this.signal = AbortSignal.any([a.signal, this.local.signal]);
    this.writes = (a.writer ?? sharedWriteWorker()).openWrites(fh.fd);
    this.order = pieceOrder(n, a.seed);
    this.fromStore = new PieceSet(n);
  }

  async loop(): Promise<void> {
    while (!this.done.complete) {
      if (this.fatal) throw this.fatal.error;
      if (this.a.signal.aborted) throw this.a.signal.reason;
      if (Date.now() - this.lastByteMs > this.a.idleTimeoutMs) {
        throw new TransferError(
          "transfer",
          `${this.a.file.path}: no source sent a byte for ${this.a.idleTimeoutMs} ms (stalled${this.lastError ? `; last error: ${this.lastError}` : ""}); the verified pieces are kept`,
        );
      }
      this.startRequests();
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, TICK_MS);
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.wake = undefined;
    }
    await this.settle();
    if (this.fatal) throw this.fatal.error;
  }

  /** Aborts what is under way and waits for it (the buffers are then free, the writes done). */
  async settle(): Promise<void> {
    if (!this.done.complete) this.local.abort(new Error("transfer ending"));
    await Promise.allSettled(this.inflight.values());
    await this.persisting?.catch(() => undefined);
    this.writes.end();
  }

  /** The sidecar: the verified pieces, after a datasync made them durable. */
  async persist(): Promise<void> {
    const snapshot = this.done.toBase64();
    await this.fh.datasync();
    const side: Sidecar = {
      version: 1,
      sha256: this.a.file.sha256,
      bytes: this.a.file.bytes,
      piece_bytes: this.a.file.pieces.bytes,
      have: snapshot,
    };
    await writeJsonAtomic(piecesFile(this.a.finalPath), side, false);
  }

  private startRequests(): void {
    const sources = this.a.sources();
    const peersHave =
      this.a.peersKnown?.() ??
      sources.some((s) => {
        const h = s.kind === "peer" ? s.has(this.a.file) : undefined;
        return h === "all" || (h !== undefined && h.count > 0);
      });
    const views: SourceView[] = sources.map((s) => {
      const st = this.state(s.id);
      const h = s.has(this.a.file);
      const f = s.fetching?.(this.a.file);
      return {
        id: s.id,
        kind: s.kind,
        has: h === "all" ? () => true : h ? (i) => h.has(i) : () => false,
        fetching: f ? (i) => f.has(i) : undefined,
        inflight: st.inflight,
        limit: st.banned
          ? 0
          : s.kind === "peer"
            ? PEER_SLOTS
            : peersHave
              ? STORE_SLOTS_WITH_PEERS
              : PIECE_REQUESTS,
        coolUntilMs: st.coolUntilMs,
      };
    });
    const wanted = this.order.filter((i) => !this.done.has(i));
    for (;;) {
      const pick = pickPiece({
        wanted,
        inflight: new Set(this.inflight.keys()),
        sources: views,
        maxInflight: PIECE_REQUESTS,
        nowMs: Date.now(),
      });
      if (!pick) return;
      const source = sources.find((s) => s.id === pick.source)!;
      const view = views.find((v) => v.id === pick.source)!;
      (view as { inflight: number }).inflight++;
      this.state(source.id).inflight++;
      if (source.kind === "store") this.fromStore.add(pick.piece);
      const p = this.fetchOne(pick.piece, source).finally(() => {
        if (source.kind === "store") this.fromStore.delete(pick.piece);
        this.inflight.delete(pick.piece);
        this.state(source.id).inflight--;
        this.wake?.();
      });
      this.inflight.set(pick.piece, p);
    }
  }

  private state(id: string): SourceState {
    let s = this.states.get(id);
    if (!s) {
      s = { inflight: 0, coolUntilMs: 0, banned: false };
      this.states.set(id, s);
    }
    return s;
  }

  private buffer(): Buffer {
    return this.buffers.pop() ?? Buffer.from(new SharedArrayBuffer(this.a.file.pieces.bytes));
  }

  private async fetchOne(i: number, source: PieceSource): Promise<void> {
    const { file } = this.a;
    const [start, end] = pieceRange(file.bytes, file.pieces.bytes, i);
    const buf = this.buffer();
    const view = buf.subarray(0, end - start);
    try {
      let body: OpenedStream["body"] | undefined;
      try {
        body = await source.get(file, start, end - 1, this.signal);
        await readInto(body, view, this.signal, () => {
          this.lastByteMs = Date.now();
        });
      } catch (e) {
        if (body) await discard(body);
        this.failed(source, e);
        return;
      }
      let digest: string;
      try {
        [digest] = await Promise.all([pieceHasher().hash(view), this.writes.write(view, start)]);
      } catch (e) {
        this.fatal ??= {
          error: new TransferError("transfer", `${file.path}: ${errText(e)}`, { cause: e }),
        };
        return;
      }
      this.fetchedBytes += view.length;
      if (source.kind === "peer") this.peerBytes += view.length;
      this.a.onReceived?.(source.kind, view.length);
      if (digest !== file.pieces.sha256[i]) {
        this.badPiece(source, i);
        return;
      }
      this.done.add(i);
      if (source.kind === "store") this.storeFailures = 0;
      this.a.onBytes?.(view.length);
      this.unpersisted += view.length;
      if (this.unpersisted >= PERSIST_BYTES && !this.persisting && !this.done.complete) {
        this.unpersisted = 0;
        this.persisting = this.persist()
          .catch((e: unknown) => {
            this.fatal ??= {
              error: new TransferError("transfer", `${file.path}: ${errText(e)}`, { cause: e }),
            };
          })
          .finally(() => {
            this.persisting = undefined;
          });
      }
    } finally {
      this.buffers.push(buf);
    }
  }

  private failed(source: PieceSource, e: unknown): void {
    if (this.a.signal.aborted || this.local.signal.aborted) return;
    this.lastError = `${source.id}: ${errText(e)}`;
    this.state(source.id).coolUntilMs = Date.now() + COOL_MS;
    if (source.kind === "store" && ++this.storeFailures >= STORE_FAILURES) {
      this.fatal ??= {
        error: new TransferError(
          "transfer",
          `cannot fetch ${this.a.file.path}: the store host failed ${STORE_FAILURES} requests in a row (${errText(e)}); the verified pieces are kept`,
          { cause: e },
        ),
      };
    }
  }

  private badPiece(source: PieceSource, i: number): void {
    const { file } = this.a;
    if (source.kind === "peer") {
      this.state(source.id).banned = true;
      source.distrust?.();
      this.lastError = `${source.id} sent piece ${i} of ${file.path} with the wrong sha256`;
      return;
    }
    if (++this.storeBad >= STORE_BAD_PIECES) {
      this.fatal ??= {
        error: new TransferError(
          "integrity",
          `${file.path}: the store host sent ${this.storeBad} pieces that do not match its own manifest's sha256`,
        ),
      };
    }
  }
}
