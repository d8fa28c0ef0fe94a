// The staging client's vocabulary: what it is given (options, usage, the hub fallback), what a stage
// is asked (StageOptions) and answers (StagedModel or DownloadFailed), and what its passes report.
import type { Logger } from "@ic/log";
import type { Clock, ModelId } from "@ic/protocol";
import type { EvictionPlan, NoFitMessageInput, StagingSettings } from "@ic/staging";
import type { Disk } from "../disk.ts";
import type { HubSource } from "../transfer/hub.ts";
import type { PeerEndpoint } from "./peer-swarm.ts";

/** Which models are in use on this node right now, from the state replica. */
export interface ModelUsage {
  /**
   * Models a live runner names directly. Include every model of an instance assigned to this node,
   * also while its runner is staging or warming up, so a lifecycle pass never removes it.
   */
  readonly live: ReadonlySet<ModelId>;
  /** Companions (MTP sidecar, drafter, split vision weights) of active models. */
  readonly companions: ReadonlySet<ModelId>;
}

export interface HubFallback {
  readonly source: HubSource;
  /** The node's model cache for direct hub downloads; checked for space on its own filesystem. */
  readonly modelCachePath: string;
}

export interface StagingClientOptions {
  /** node_cache_path, already expanded. */
  readonly root: string;
  /** Base URL of the store host (`http://host:port`); without it every stage goes to the hub. */
  readonly storeUrl?: string | undefined;
  /** The store's store_path when its files are visible on this machine; same filesystem => hardlinks. */
  readonly storeLocalPath?: string | undefined;
  readonly settings: StagingSettings;
  readonly usage?: (() => ModelUsage) | undefined;
  readonly hub?: HubFallback | undefined;
  readonly disk?: Disk | undefined;
  readonly clock?: Pick<Clock, "now"> | undefined;
  readonly logger: Logger;
  /** Headers sent with every store request (manifests and files), e.g. the bearer token. */
  readonly storeHeaders?: Readonly<Record<string, string>> | undefined;
  /**
   * Replaces the HTTP client of every store request. File bodies then come through fetch's web
   * stream and are copied chunk by chunk, which costs several times the CPU per byte of the direct
   * transport used without it; pass credentials as `storeHeaders` instead where possible.
   */
  readonly fetch?: typeof fetch | undefined;
  /**
   * The other nodes of the cluster: a copy with piece hashes is fetched from the store host and
   * from those of them that hold pieces of it (verified against the store host's manifest).
   */
  readonly peers?: (() => readonly PeerEndpoint[]) | undefined;
  /** Counts the bytes staged copies receive, by source (shared across clients; default its own). */
  readonly counters?: StagingCounters | undefined;
  /** This node's name: orders its pieces differently from its peers'. */
  readonly nodeName?: string | undefined;
  /** Timeout of a manifest request; the store counts as unreachable after it (default 10 s). */
  readonly manifestTimeoutMs?: number | undefined;
  /**
   * A file download (store or hub) that receives nothing for this long fails and is retried by the
   * caller, resuming from its partial (default DEFAULT_TRANSFER_IDLE_MS, 30 s).
   */
  readonly transferIdleTimeoutMs?: number | undefined;
}

/** Bytes this node's staged copies received from the store host and from peers, since it started. */
export interface StagingCounters {
  from_store_bytes: number;
  from_peers_bytes: number;
}

export interface StageProgress {
  readonly modelId: ModelId;
  readonly file: string;
  readonly phase: "link" | "transfer";
  readonly fileDoneBytes: number;
  readonly fileBytes: number;
  /** Bytes of this model present so far (reused, resumed, linked and fetched). */
  readonly doneBytes: number;
  readonly totalBytes: number;
}

export interface StageOptions {
  /** Store host to stage from for this call; overrides the client's `storeUrl` (the store may move). */
  readonly storeUrl?: string | undefined;
  /** Companion repositories staged after the base, one transfer at a time, protected with it. */
  readonly companions?: readonly ModelId[] | undefined;
  /**
   * The GGUF the engine loads (the registered model's `file`): a direct hub download fetches that
   * quantization only, as the store host's pull did (see hub-select.ts).
   */
  readonly servedFile?: string | undefined;
  readonly onProgress?: ((p: StageProgress) => void) | undefined;
  readonly signal?: AbortSignal | undefined;
}

export interface StagedModel {
  readonly modelId: ModelId;
  /** Directory the engine loads from. */
  readonly path: string;
  /** store: copied or linked from the store host; hub: direct hub download into the model cache. */
  readonly source: "store" | "hub";
  readonly totalBytes: number;
  /** Bytes received for this copy (a piece that failed its hash and came again counts twice). */
  readonly fetchedBytes: number;
  /** Of those, bytes that came from peers rather than the store host. */
  readonly peerBytes: number;
  readonly resumedBytes: number;
  readonly linkedBytes: number;
  readonly reusedBytes: number;
  /** Copies the capacity pass deleted to make room. */
  readonly evicted: ModelId[];
}

export const DOWNLOAD_FAILED_CAUSES = [
  "no_fit",
  "store_unreachable",
  "not_in_store",
  "store_error",
  "hub_error",
  "transfer",
  "integrity",
  "aborted",
] as const;
export type DownloadFailedCause = (typeof DOWNLOAD_FAILED_CAUSES)[number];

/** A transfer that did not happen or did not finish; the caller publishes it as a DownloadFailed event. */
export interface DownloadFailed {
  readonly ok: false;
  readonly type: "DownloadFailed";
  readonly modelId: ModelId;
  readonly cause: DownloadFailedCause;
  /** The event's reason; for no_fit it carries the byte arithmetic. */
  readonly message: string;
  readonly retryable: boolean;
  /** no_fit only: the numbers behind the message. */
  readonly arithmetic?: NoFitMessageInput;
  /** Models of the same request staged before the failure (base before a failed companion). */
  readonly staged: StagedModel[];
}

export type StageResult = { readonly ok: true; readonly models: StagedModel[] } | DownloadFailed;

/** One directory under the staging root. */
export interface StagedEntry {
  readonly modelId: ModelId;
  readonly path: string;
  readonly bytes: number;
  /** Bytes deleting the copy frees (files hardlinked from the store free nothing). */
  readonly freeableBytes: number;
  readonly lastUsedMs: number;
  readonly complete: boolean;
  readonly downloading: boolean;
  readonly inUse: boolean;
  readonly companionOfActive: boolean;
}

/** What a pass deleted; field names match the bus purge reply. */
export interface EvictionOutcome {
  readonly plan: EvictionPlan;
  readonly deleted: ModelId[];
  readonly freed_bytes: number;
  readonly failed: { modelId: ModelId; error: string }[];
}

/** Purge result, shaped like the `ic.store.purge` reply fields. */
export interface PurgeOutcome {
  readonly deleted: ModelId[];
  readonly freed_bytes: number;
  readonly skipped_in_use: ModelId[];
}
