// Adapts the store's StagingClient to the worker's Stager port: stages over HTTP from the store host
// that registered the model, reports DownloadFailed to the master, and feeds in-use sets to eviction.
import { join } from "node:path";
import type { Logger } from "@ic/log";
import { ServiceError } from "@ic/protocol";
import type { ModelId, ModelRecord } from "@ic/protocol";
import { StagingClient } from "@ic/store";
import type { StagingSettings } from "@ic/staging";
import type { HubFallback, PeerEndpoint, StagingCounters } from "@ic/store";
import type { ClusterPort, StagedModel, Stager, StagingProgress } from "@ic/worker";

export interface StoreStagerOptions {
  readonly root: string;
  readonly settings: StagingSettings;
  readonly log: Logger;
  readonly cluster: ClusterPort;
  /** This node's own store_path (hardlinks instead of copies when on the same filesystem). */
  readonly storeLocalPath?: string | undefined;
  readonly hub?: HubFallback | undefined;
  /** Bearer token for the store host's API (the cluster's node token), read at each request. */
  readonly storeToken?: (() => string) | undefined;
  /** model_store.transfer_idle_timeout_ms: a download that receives nothing this long is retried. */
  readonly transferIdleTimeoutMs?: number | undefined;
  /** The other live nodes' APIs: copies are fetched from those that hold pieces of them too. */
  readonly peers?: (() => readonly PeerEndpoint[]) | undefined;
  /** This node's name (its own order of pieces). */
  readonly nodeName?: string | undefined;
}

/** fetch with the node's bearer token on every request (store downloads only, never the hub). */
function withToken(token: (() => string) | undefined): typeof fetch | undefined {
  if (token === undefined) return undefined;
  return (input, init) => {
    const headers = new Headers(init?.headers);
    headers.set("authorization", `Bearer ${token()}`);
    return fetch(input, { ...init, headers });
  };
}

export class StoreStager implements Stager, AsyncDisposable {
  private client: StagingClient | undefined;
  private clientUrl: string | undefined;
  /** The client switch under way (clientFor): the next waits for it. */
  private switching: Promise<unknown> = Promise.resolve();
  private live = new Set<ModelId>();
  private companions = new Set<ModelId>();
  private readonly log: Logger;
  /** Bytes staged copies received, by source; kept across staging clients (the store may move). */
  readonly counters: StagingCounters = { from_store_bytes: 0, from_peers_bytes: 0 };

  constructor(private readonly o: StoreStagerOptions) {
    this.log = o.log.child({ component: "staging" });
  }

  /** Startup reconciliation of copies orphaned by a crashed session (eviction trigger 2). */
  async start(): Promise<void> {
    await this.clientFor(undefined);
  }

  /**
   * The running staging client for a store URL (one store host per cluster; recreated if it moves).
   * One at a time: two stages asking at once would otherwise each make a client over the same root,
   * each with its own transfer queue and its own idea of what is downloading (one's startup pass
   * could delete the other's copy in progress).
   */
  private clientFor(storeUrl: string | undefined): Promise<StagingClient> {
    const next = this.switching.then(
      () => this.switchTo(storeUrl),
      () => this.switchTo(storeUrl),
    );
    this.switching = next;
    return next;
  }

  private async switchTo(storeUrl: string | undefined): Promise<StagingClient> {
    if (this.client && (storeUrl === undefined || storeUrl === this.clientUrl)) return this.client;
    const old = this.client;
    const client = new StagingClient({
      root: this.o.root,
      storeUrl,
      storeLocalPath: this.o.storeLocalPath,
      settings: this.o.settings,
      usage: () => ({ live: this.live, companions: this.companions }),
      hub: this.o.hub,
      logger: this.o.log,
      fetch: withToken(this.o.storeToken),
      transferIdleTimeoutMs: this.o.transferIdleTimeoutMs,
      peers: this.o.peers,
      nodeName: this.o.nodeName,
      counters: this.counters,
    });
    await client.start();
    this.client = client;
    this.clientUrl = storeUrl;
    if (old) await old.stop();
    return client;
  }

  /** The current staging client (for reports and purges). */
  get staging(): StagingClient {
    if (!this.client) throw new Error("staging not started");
    return this.client;
  }

  async stage(
    model: ModelRecord,
    signal: AbortSignal,
    onProgress?: (p: StagingProgress) => void,
  ): Promise<StagedModel> {
    const companions = [model.drafter, model.mtp_sidecar].filter((x): x is ModelId => Boolean(x));
    for (const c of companions) this.companions.add(c);
    this.live.add(model.model_id);
    const client = await this.clientFor(model.store_url);
    let lastLog = 0;
    const r = await client.stage(model.model_id, {
      companions,
      servedFile: model.file,
      signal,
      onProgress: (p) => {
        // Only the base model's bytes: the runner's progress is about the model it loads.
        if (p.modelId === model.model_id)
          onProgress?.({ doneBytes: p.doneBytes, totalBytes: p.totalBytes });
        const now = Date.now();
        if (now - lastLog < 2000 && p.doneBytes < p.totalBytes) return;
        lastLog = now;
        this.log.info(
          { model: p.modelId, file: p.file, done: p.doneBytes, total: p.totalBytes },
          "staging progress",
        );
      },
    });
    if (!r.ok) {
      await this.o.cluster
        .command({ type: "ReportDownloadFailed", model_id: r.modelId, reason: r.message })
        .catch((e: unknown) => this.log.warn({ err: e }, "could not report DownloadFailed"));
      throw new ServiceError("download_failed", `DownloadFailed for ${r.modelId}: ${r.message}`);
    }
    const base = r.models.find((m) => m.modelId === model.model_id)!;
    await client.touch(model.model_id);
    return {
      dir: base.path,
      modelPath: join(base.path, model.file),
      mmprojPath: model.mmproj ? join(base.path, model.mmproj) : undefined,
    };
  }

  setInUse(live: readonly ModelId[], companions: readonly ModelId[]): void {
    this.live = new Set(live);
    this.companions = new Set(companions);
  }

  async released(modelId: ModelId): Promise<void> {
    const out = await this.staging.deactivated([modelId]);
    if (out.deleted.length > 0)
      this.log.info(
        { deleted: out.deleted, freed_bytes: out.freed_bytes },
        "deactivation eviction",
      );
  }

  async stop(): Promise<void> {
    await this.client?.stop();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
