// The store host as a node component (a node with store_path): it serves the models it holds under
// /store/models on this node's API, runs the hub pulls every node asks for over the bus, watches
// store_path for models copied in or removed by hand, and registers its models with the master once
// this node has joined a session (and again after each change); hashing never delays registration.
import type { Bus } from "@ic/bus";
import type { Config } from "@ic/config";
import type { Component } from "@ic/http";
import type { Logger } from "@ic/log";
import type { ClusterView, ModelId } from "@ic/protocol";
import type { StagingSettings } from "@ic/staging";
import { createHubSource } from "../transfer/hub.ts";
import { pullMetrics } from "./metrics.ts";
import { servePulls } from "./routes.ts";
import { looseEntryHealth, missingModelHealth } from "./store-health.ts";
import { PullManager } from "./pulls.ts";
import { Registration } from "./registration.ts";
import { changedModelHealth, hashingHealth, refusedModelHealth } from "./store-health.ts";
import { StoreHost } from "./store-host.ts";
import { StoreWatch } from "./store-watch.ts";
import type { LooseEntry } from "./store-watch.ts";

export interface StoreHostComponentOptions {
  readonly storePath: string;
  readonly modelStore: Pick<Config["model_store"], "hub_url" | "transfer_idle_timeout_ms">;
  readonly settings: Pick<StagingSettings, "headroomBytes">;
  readonly cluster: Pick<ClusterView, "command" | "sessionId" | "synced" | "nodeId">;
  readonly bus: Pick<Bus, "respond">;
  /** This node, as pull requests locate the store host; `apiUrl` is what registered models name. */
  readonly self: { readonly name: string; readonly apiUrl: string };
  /** The hub token (from the environment only; never logged). */
  readonly hubToken: string | undefined;
  readonly log: Logger;
  /** Pause between registration passes (default 500 ms). */
  readonly registerEveryMs?: number;
  /** Models hashed at once in the background (default 1). */
  readonly hashConcurrency?: number;
  /** How long a model directory's files must stay unchanged before it is admitted (default 3 s). */
  readonly settleMs?: number;
}

export interface StoreHostComponent extends Component {
  readonly host: StoreHost;
  readonly pulls: PullManager;
}

export function storeHostComponent(o: StoreHostComponentOptions): StoreHostComponent {
  const { log } = o;
  const st: HostState = { version: 0, missing: new Map(), loose: [] };
  const host = new StoreHost({
    storePath: o.storePath,
    logger: log,
    headroomBytes: o.settings,
    hub: createHubSource({ hubUrl: o.modelStore.hub_url, accessToken: o.hubToken }),
    transferIdleTimeoutMs: o.modelStore.transfer_idle_timeout_ms,
    hashConcurrency: o.hashConcurrency,
    onModelsChanged: () => void st.version++,
    // Registered before a backfill found a file changed: out of the registry (refused while in use).
    onWithdrawn: (id) =>
      void o.cluster
        .command({ type: "DeregisterModel", model_id: id })
        .catch((e: unknown) =>
          log.warn(
            { err: e, modelId: id },
            "a model whose files changed stays registered while something uses it; it is not served",
          ),
        ),
  });
  const pulls = new PullManager({
    target: host,
    onDone: () => void st.version++,
    // A model whose model.json names a drafter or an MTP sidecar brings it along.
    missingCompanions: (id) => host.missingCompanions(id),
  });
  const watch = storeWatch(o, host, st);
  const registration = new Registration({
    cluster: o.cluster,
    host,
    apiUrl: o.self.apiUrl,
    log,
    version: () => st.version,
    everyMs: o.registerEveryMs,
  });
  let unservePulls: (() => void) | undefined;
  return {
    name: "store-host",
    host,
    pulls,
    async start() {
      await host.start();
      unservePulls = servePulls(o.bus, pulls, host, o.self);
      watch.start();
      registration.start();
    },
    async stop() {
      await registration.stop();
      await watch.stop();
      unservePulls?.();
      pulls.stop();
      await host.stop();
    },
    routes: () => host.app,
    metrics: (registry) => pullMetrics(registry, pulls),
    heartbeat: () => ({
      ...(pulls.list().length > 0 ? { pulls: pulls.list() } : {}),
      health: [
        ...missingModelHealth(st.missing),
        ...changedModelHealth(host.changedModels()),
        ...refusedModelHealth(registration.refusals()),
        ...looseEntryHealth(st.loose),
        ...hashingHealth(host.hashing()),
      ],
    }),
  };
}

/** What the host's watch, registration and health share. */
interface HostState {
  /** Bumped when the store's models change (a pull finished, a copied model found): re-register. */
  version: number;
  /** Models whose directory was removed by hand while in use, with the master's refusal. */
  readonly missing: Map<ModelId, string>;
  /** What lies unserved at the top of store_path (a loose .gguf, a misnamed folder). */
  loose: LooseEntry[];
}

/**
 * The watch of store_path: models copied in are admitted once settled (served, reported as changed,
 * or hashed in the background), removed ones leave.
 */
function storeWatch(o: StoreHostComponentOptions, host: StoreHost, st: HostState): StoreWatch {
  const { log, cluster } = o;
  return new StoreWatch({
    storePath: o.storePath,
    registered: (id) => host.manifest(id) !== undefined,
    admit: (id) => host.admit(id),
    verify: (id) => host.verify(id),
    badSignature: (id) => host.changedSignature(id),
    onAdded: (id) => {
      st.missing.delete(id);
      st.version++;
    },
    onLoose: (next) => {
      const before = new Set(st.loose.map((e) => e.name));
      for (const e of next)
        if (!before.has(e.name)) log.warn({ entry: e.name }, `store_path: ${e.hint}`);
      st.loose = next;
    },
    registeredIds: () => [
      ...host.models().map((m) => m.model_id),
      ...[...st.missing.keys()].filter((id) => host.manifest(id) === undefined),
    ],
    // Removed by hand: no longer served, and out of the registry; while something uses it the
    // master refuses, so it stays in the health list (store_model_missing) and each scan asks again.
    onRemoved: (id) => {
      host.forget(id);
      cluster.command({ type: "DeregisterModel", model_id: id }).then(
        () => st.missing.delete(id),
        (e: unknown) => {
          if (!st.missing.has(id))
            log.warn(
              { err: e, modelId: id },
              "a model directory was removed from store_path while the model is in use; it leaves the registry once nothing uses it",
            );
          st.missing.set(id, e instanceof Error ? e.message : String(e));
        },
      );
    },
    // An unserved directory (changed, or being hashed) removed: its report and hash go with it.
    onUnservedGone: (id) => host.forget(id),
    log,
    settleMs: o.settleMs,
  });
}
