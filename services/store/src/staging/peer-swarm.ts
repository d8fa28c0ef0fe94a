// The sources of one model's pieces while it is staged: the store host (every piece) and the peers
// that hold some of it, asked every POLL_MS which pieces they can serve (GET .../pieces). A peer's
// answer counts only where it matches the store host's manifest (same path, size, sha256 and piece
// size); what a peer sends is checked piece by piece against that manifest anyway.
import type { Logger } from "@ic/log";
import { PeerPiecesSchema, type ModelId, type StoreManifest } from "@ic/protocol";
import { PieceSet } from "../pieces.ts";
import type { PieceFile, PieceSource } from "../transfer/piece-fetch.ts";
import { errText } from "../transfer/transfer.ts";
import { fileUrl, modelUrl, type StoreAccess } from "./store-access.ts";

/** Another node of the cluster, by its API base URL. */
export interface PeerEndpoint {
  readonly name: string;
  readonly url: string;
}

/** How often the peers are asked what they hold, while a copy is staged. */
const POLL_MS = 1000;
/** The longest wait for one peer's answer. */
const ASK_TIMEOUT_MS = 2000;
/** Peers asked at most (the first ones listed). */
const MAX_PEERS = 32;

export class PeerSwarm {
  private readonly held = new Map<string, Map<string, PieceSet | "all">>();
  /** Per peer, per file: the pieces it is fetching from the store host now. */
  private readonly claimed = new Map<string, Map<string, PieceSet>>();
  /** Peers that sent a piece with the wrong hash: not asked again while this copy is staged. */
  private readonly distrusted = new Set<string>();
  private readonly controller = new AbortController();
  private running: Promise<void> | undefined;
  private readonly store: PieceSource;

  constructor(
    private readonly o: {
      readonly modelId: ModelId;
      readonly manifest: StoreManifest;
      readonly storeUrl: string;
      readonly access: StoreAccess;
      readonly peers: () => readonly PeerEndpoint[];
      readonly log: Logger;
    },
  ) {
    this.store = {
      id: "store",
      kind: "store",
      has: () => "all",
      get: (file, start, end, signal) =>
        o.access.range(
          fileUrl(o.storeUrl, "models", o.modelId, file.path),
          file,
          { start, end },
          signal,
        ),
    };
  }

  /**
   * Starts asking the peers; resolves once the first round is in (each peer answered, failed or
   * timed out: at most ASK_TIMEOUT_MS), so the first requests already know what peers hold. Goes on
   * until stop() or the signal.
   */
  start(signal: AbortSignal): Promise<void> {
    const stop = () => this.controller.abort(signal.reason);
    if (signal.aborted) stop();
    else signal.addEventListener("abort", stop, { once: true });
    let first!: () => void;
    const firstRound = new Promise<void>((resolve) => (first = resolve));
    this.running = this.poll(first).finally(() => {
      first();
      signal.removeEventListener("abort", stop);
    });
    return firstRound;
  }

  async stop(): Promise<void> {
    this.controller.abort(new Error("staging done"));
    await this.running;
  }

  /** The store host, then every peer that holds something of the model now. */
  sources(): PieceSource[] {
    const out: PieceSource[] = [this.store];
    for (const peer of this.o.peers().slice(0, MAX_PEERS)) {
      const files = this.held.get(peer.name);
      if (!files || files.size === 0 || this.distrusted.has(peer.name)) continue;
      out.push({
        id: `peer ${peer.name}`,
        kind: "peer",
        has: (file: PieceFile) => files.get(file.path),
        fetching: (file: PieceFile) => this.claimed.get(peer.name)?.get(file.path),
        distrust: () => {
          if (this.distrusted.has(peer.name)) return;
          this.distrusted.add(peer.name);
          this.o.log.warn(
            { modelId: this.o.modelId, peer: peer.name },
            "a peer sent a piece that does not match the store host's manifest; not asked again for this copy",
          );
        },
        get: (file, start, end, signal) =>
          this.o.access.range(
            fileUrl(peer.url, "staged", this.o.modelId, file.path),
            file,
            { start, end },
            signal,
          ),
      });
    }
    return out;
  }

  private async poll(roundDone: () => void): Promise<void> {
    const signal = this.controller.signal;
    while (!signal.aborted) {
      const peers = this.o.peers().slice(0, MAX_PEERS);
      await Promise.all(peers.map((p) => this.ask(p, signal)));
      roundDone();
      for (const name of this.held.keys())
        if (!peers.some((p) => p.name === name)) {
          this.held.delete(name);
          this.claimed.delete(name);
        }
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(t);
          signal.removeEventListener("abort", done);
          resolve();
        };
        const t = setTimeout(done, POLL_MS);
        signal.addEventListener("abort", done, { once: true });
      });
    }
  }

  /** One peer's pieces of the model, matched against the manifest; nothing on any failure. */
  private async ask(peer: PeerEndpoint, signal: AbortSignal): Promise<void> {
    let body: unknown;
    try {
      body = await this.o.access.json(
        `${modelUrl(peer.url, "staged", this.o.modelId)}/pieces`,
        AbortSignal.any([signal, AbortSignal.timeout(ASK_TIMEOUT_MS)]),
      );
    } catch (e) {
      if (!signal.aborted)
        this.o.log.debug({ peer: peer.name, err: errText(e) }, "peer did not say what it holds");
      this.held.delete(peer.name);
      this.claimed.delete(peer.name);
      return;
    }
    const parsed = body === null ? null : PeerPiecesSchema.safeParse(body);
    if (!parsed?.success || parsed.data.model_id !== this.o.modelId) {
      this.held.delete(peer.name);
      this.claimed.delete(peer.name);
      return;
    }
    const files = new Map<string, PieceSet | "all">();
    const claims = new Map<string, PieceSet>();
    for (const f of parsed.data.files) {
      const m = this.o.manifest.files.find((x) => x.path === f.path);
      if (!m?.pieces || m.bytes !== f.bytes || m.sha256 !== f.sha256) continue;
      if (f.have === "all") {
        files.set(f.path, "all");
        continue;
      }
      if (f.piece_bytes !== m.pieces.bytes) continue;
      const set = PieceSet.fromBase64(f.have, m.pieces.sha256.length);
      if (set) files.set(f.path, set);
      const coming = f.fetching && PieceSet.fromBase64(f.fetching, m.pieces.sha256.length);
      if (coming) claims.set(f.path, coming);
    }
    this.held.set(peer.name, files);
    this.claimed.set(peer.name, claims);
  }
}
