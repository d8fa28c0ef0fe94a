// What a node serves of its staged copies to peers: every file of a complete copy, and of a copy
// being filled the pieces it verified so far (fill.ts reports them as they land). It answers the
// two peer routes (staging/routes.ts); it does not fetch (peer-swarm.ts) or decide what is staged.
import { ServiceError, type ModelId, type PeerPieces } from "@ic/protocol";
import { artifactFile } from "../paths.ts";
import type { RecordFile, StagingRecord } from "../record.ts";
import type { ServableFile } from "../transfer/fill.ts";

/** Where the staged copies are, and the record of a complete one (null while it changes). */
export interface PeerServingSource {
  readonly dir: (modelId: ModelId) => string;
  readonly complete: (modelId: ModelId) => Promise<StagingRecord | null>;
}

export class PeerServing {
  /** Copies being filled now: what of each file peers may fetch already. */
  private readonly filling = new Map<
    ModelId,
    { readonly files: readonly RecordFile[]; readonly have: Map<string, ServableFile> }
  >();

  constructor(private readonly source: PeerServingSource) {}

  /** A copy starts filling: the map its fill reports verified files and pieces into. */
  begin(modelId: ModelId, files: readonly RecordFile[]): Map<string, ServableFile> {
    const have = new Map<string, ServableFile>();
    this.filling.set(modelId, { files, have });
    return have;
  }

  /** The fill ended (done, failed or aborted): a complete copy is served from its record. */
  end(modelId: ModelId): void {
    this.filling.delete(modelId);
  }

  /**
   * What of the model this node can serve to peers now (a complete copy: every file; a copy being
   * staged: its verified pieces); null when it has none.
   */
  async pieces(modelId: ModelId): Promise<PeerPieces | null> {
    const filling = this.filling.get(modelId);
    if (filling) return { model_id: modelId, files: fillingPieces(filling.files, filling.have) };
    const record = await this.source.complete(modelId);
    if (!record) return null;
    return {
      model_id: modelId,
      files: record.files.flatMap((f) =>
        f.sha256 ? [{ path: f.path, bytes: f.bytes, sha256: f.sha256, have: "all" as const }] : [],
      ),
    };
  }

  /**
   * The file to read bytes [start, end] of `path` from (the partial while the copy is staged;
   * `finalPath` once it is renamed into place), when every piece they touch is verified here; a
   * ServiceError (not_found, conflict) else.
   */
  async file(
    modelId: ModelId,
    path: string,
    { start, end }: { readonly start: number; readonly end: number },
  ): Promise<{ readonly path: string; readonly finalPath: string; readonly file: RecordFile }> {
    const finalPath = artifactFile(this.source.dir(modelId), path);
    const filling = this.filling.get(modelId);
    if (filling) {
      const file = filling.files.find((f) => f.path === path);
      const have = filling.have.get(path);
      if (file && have?.kind === "all") return { path: finalPath, finalPath, file };
      if (file && have?.kind === "pieces") {
        if (end < file.bytes && have.set.covers(start, end, have.pieceBytes))
          return { path: have.part, finalPath, file };
      }
      throw new ServiceError(
        "conflict",
        `this node does not hold bytes ${start}-${end} of ${modelId}/${path} yet`,
      );
    }
    const record = await this.source.complete(modelId);
    const file = record?.files.find((f) => f.path === path);
    if (!file) throw new ServiceError("not_found", `no staged copy of ${modelId}/${path} here`);
    return { path: finalPath, finalPath, file };
  }
}

/** The files of a copy being filled that peers may fetch something of, and what. */
function fillingPieces(
  files: readonly RecordFile[],
  have: ReadonlyMap<string, ServableFile>,
): PeerPieces["files"] {
  const out: PeerPieces["files"] = [];
  for (const f of files) {
    const h = have.get(f.path);
    if (!h || !f.sha256) continue;
    if (h.kind === "all") out.push({ path: f.path, bytes: f.bytes, sha256: f.sha256, have: "all" });
    else if (h.set.count > 0 || h.fromStore.count > 0)
      out.push({
        path: f.path,
        bytes: f.bytes,
        sha256: f.sha256,
        piece_bytes: h.pieceBytes,
        have: h.set.toBase64(),
        ...(h.fromStore.count > 0 ? { fetching: h.fromStore.toBase64() } : {}),
      });
  }
  return out;
}
