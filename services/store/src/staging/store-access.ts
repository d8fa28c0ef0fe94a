// Reading a model from the store host: its manifest (the answer sorted into what staging does next:
// copy, fall back to the hub, or fail with a cause) and an opener per file that resumes with a range
// request pinned to the file's hash.
import { StoreManifestSchema, type ModelId, type StoreManifest } from "@ic/protocol";
import type { RecordFile } from "../record.ts";
import { directGet } from "../transfer/direct-get.ts";
import { parseContentRange } from "../transfer/range.ts";
import { discard, errText, type OpenAt, type OpenedStream } from "../transfer/transfer.ts";
import type { StagingClientOptions } from "./staging-types.ts";

/**
 * `<base>/store/<kind>/<org>/<name>`: a model on a store host (`models`) or a node's staged copy
 * served to peers (`staged`).
 */
export function modelUrl(base: string, kind: "models" | "staged", modelId: ModelId): string {
  const [org, name] = modelId.split("/") as [string, string];
  return `${base.replace(/\/+$/, "")}/store/${kind}/${encodeURIComponent(org)}/${encodeURIComponent(name)}`;
}

/** A file of that model: `.../files/<path>`, each segment percent-encoded. */
export function fileUrl(
  base: string,
  kind: "models" | "staged",
  modelId: ModelId,
  path: string,
): string {
  return `${modelUrl(base, kind, modelId)}/files/${path.split("/").map(encodeURIComponent).join("/")}`;
}

export type ManifestFetch =
  | { kind: "ok"; manifest: StoreManifest }
  | { kind: "unreachable" | "not_in_store" | "store_error" | "aborted"; message: string };

/** One store host's model API, with the client's headers, HTTP client and manifest timeout. */
export class StoreAccess {
  private readonly fetchFn: typeof fetch;

  constructor(
    private readonly o: Pick<StagingClientOptions, "storeHeaders" | "fetch" | "manifestTimeoutMs">,
  ) {
    this.fetchFn = o.fetch ?? fetch;
  }

  async fetchManifest(
    storeUrl: string,
    modelId: ModelId,
    signal: AbortSignal,
  ): Promise<ManifestFetch> {
    const url = `${modelUrl(storeUrl, "models", modelId)}/manifest`;
    const timeout = AbortSignal.timeout(this.o.manifestTimeoutMs ?? 10_000);
    let res: Response;
    try {
      res = await this.fetchFn(url, {
        headers: { ...this.o.storeHeaders },
        signal: AbortSignal.any([signal, timeout]),
      });
    } catch (e) {
      if (signal.aborted) return { kind: "aborted", message: `staging ${modelId} aborted` };
      return {
        kind: "unreachable",
        message: `store at ${storeUrl} unreachable: ${errText(e)}`,
      };
    }
    if (res.status === 404) {
      await res.body?.cancel();
      return { kind: "not_in_store", message: `${modelId} is not registered in the store` };
    }
    if (res.status >= 500) {
      await res.body?.cancel();
      return {
        kind: "unreachable",
        message: `store answered ${res.status} for the manifest of ${modelId}`,
      };
    }
    if (!res.ok) {
      await res.body?.cancel();
      return {
        kind: "store_error",
        message: `store answered ${res.status} for the manifest of ${modelId}`,
      };
    }
    let json: unknown;
    try {
      json = await res.json();
    } catch (e) {
      return { kind: "store_error", message: `manifest of ${modelId} is not JSON: ${errText(e)}` };
    }
    const parsed = StoreManifestSchema.safeParse(json);
    if (!parsed.success || parsed.data.model_id !== modelId) {
      const why = parsed.success ? `names ${parsed.data.model_id}` : parsed.error.message;
      return {
        kind: "store_error",
        message: `invalid manifest for ${modelId} from the store: ${why}`,
      };
    }
    return { kind: "ok", manifest: parsed.data };
  }

  opener(storeUrl: string, modelId: ModelId, file: RecordFile): OpenAt {
    const url = fileUrl(storeUrl, "models", modelId, file.path);
    return async (offset, signal) => {
      const headers: Record<string, string> = { ...this.o.storeHeaders };
      if (offset > 0) {
        headers.range = `bytes=${offset}-`;
        if (file.sha256) headers["if-range"] = `"${file.sha256}"`;
      }
      const res = await this.getFile(url, headers, signal);
      if (res.status === 206) {
        const cr = parseContentRange(res.contentRange);
        if (!cr || cr.total !== file.bytes) {
          await discard(res.body);
          throw new Error(`bad content-range ${res.contentRange} for ${file.path}`);
        }
        return { body: res.body, offset: cr.start };
      }
      if (res.status === 200) return { body: res.body, offset: 0 };
      await discard(res.body);
      throw new Error(`store answered ${res.status} for ${file.path}`);
    };
  }

  /**
   * Bytes [start, end] (inclusive) of a file at `url` (a store host's or a peer's), pinned to its
   * sha256: anything but a 206 with exactly that range is an error.
   */
  async range(
    url: string,
    file: { readonly path: string; readonly bytes: number; readonly sha256: string },
    { start, end }: { readonly start: number; readonly end: number },
    signal: AbortSignal,
  ): Promise<OpenedStream["body"]> {
    const headers: Record<string, string> = {
      ...this.o.storeHeaders,
      range: `bytes=${start}-${end}`,
      "if-range": `"${file.sha256}"`,
    };
    const res = await this.getFile(url, headers, signal);
    const cr = res.status === 206 ? parseContentRange(res.contentRange) : null;
    if (cr && cr.start === start && cr.end === end && cr.total === file.bytes) return res.body;
    await discard(res.body);
    throw new Error(
      res.status === 206
        ? `bad content-range ${res.contentRange} for bytes ${start}-${end} of ${file.path}`
        : `answered ${res.status} for bytes ${start}-${end} of ${file.path}`,
    );
  }

  /** JSON from `url` with the client's headers and the manifest timeout; null on a 404. */
  async json(url: string, signal: AbortSignal): Promise<unknown> {
    const timeout = AbortSignal.timeout(this.o.manifestTimeoutMs ?? 10_000);
    const res = await this.fetchFn(url, {
      headers: { ...this.o.storeHeaders },
      signal: AbortSignal.any([signal, timeout]),
    });
    if (res.status === 404) {
      await res.body?.cancel();
      return null;
    }
    if (!res.ok) {
      await res.body?.cancel();
      throw new Error(`answered ${res.status}`);
    }
    return res.json();
  }

  /**
   * One file request: read straight into the transfer's slabs over plain http; through the injected
   * fetch when there is one (or for an https store), as a web stream.
   */
  private async getFile(
    url: string,
    headers: Record<string, string>,
    signal: AbortSignal,
  ): Promise<{ status: number; contentRange: string | null; body: OpenedStream["body"] }> {
    const u = new URL(url);
    if (!this.o.fetch && u.protocol === "http:") {
      const res = await directGet(u, headers, signal);
      return {
        status: res.status,
        contentRange: res.headers.get("content-range") ?? null,
        body: res.body,
      };
    }
    const res = await this.fetchFn(url, { headers, signal });
    if (!res.body) throw new Error(`store answered ${res.status} without a body for ${url}`);
    return { status: res.status, contentRange: res.headers.get("content-range"), body: res.body };
  }
}
