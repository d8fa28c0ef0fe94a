// The store host as a node component (a node with store_path): it serves the models it holds under
// /store/models on this node's API, runs the hub pulls every node asks for over the bus, watches
// store_path for models copied in or removed by hand, and registers its models with the master once
// this node has joined a session (and again after each change).
import { basename, dirname } from "node:path";
import type { Bus } from "@ic/bus";
import type { Config } from "@ic/config";
import type { Component } from "@ic/http";
import type { Logger } from "@ic/log";
import type { ClusterView, ModelId } from "@ic/protocol";
import type { StagingSettings } from "@ic/staging";
import { createHubSource } from "../hub/hub.ts";
import { looseEntryHealth, missingModelHealth, servePulls } from "../routes.ts";
import { PullManager } from "./pulls.ts";
import { readModelDir } from "./registry.ts";
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
  /** How often registration is retried until it succeeds for the session (default 500 ms). */
  readonly registerEveryMs?: number;
}

export interface StoreHostComponent extends Component {
  readonly host: StoreHost;
  readonly pulls: PullManager;
}

export function storeHostComponent(o: StoreHostComponentOptions): StoreHostComponent {
  const { log } = o;
  const host = new StoreHost({
    storePath: o.storePath,
    logger: log,
    headroomBytes: o.settings,
    hub: createHubSource({ hubUrl: o.modelStore.hub_url, accessToken: o.hubToken }),
    transferIdleTimeoutMs: o.modelStore.transfer_idle_timeout_ms,
  });
  const st: HostState = { version: 0, missing: new Map(), loose: [] };
  const pulls = new PullManager({
    target: host,
    onDone: () => void st.version++,
    // A model whose model.json names a drafter or an MTP sidecar brings it along.
    missingCompanions: (id) => host.missingCompanions(id),
  });
  const watch = storeWatch(o, host, st);
  const register = registration(o, host, st);
  let unservePulls: (() => void) | undefined;
  let timer: NodeJS.Timeout | undefined;
  return {
    name: "store-host",
    host,
    pulls,
    async start() {
      await host.start();
      unservePulls = servePulls(o.bus, pulls, host, o.self);
      watch.start();
      timer = setInterval(
        () => register().catch((e: unknown) => log.debug({ err: e }, "model registration retry")),
        o.registerEveryMs ?? 500,
      );
    },
    async stop() {
      clearInterval(timer);
      await watch.stop();
      unservePulls?.();
      pulls.stop();
      await host.stop();
    },
    routes: (app) => void app.route("/", host.app),
    heartbeat: () => ({
      ...(pulls.list().length > 0 ? { pulls: pulls.list() } : {}),
      health: [...missingModelHealth(st.missing), ...looseEntryHealth(st.loose)],
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

/** The watch of store_path: models copied in register once settled, removed ones leave. */
function storeWatch(o: StoreHostComponentOptions, host: StoreHost, st: HostState): StoreWatch {
  const { log, cluster } = o;
  return new StoreWatch({
    storePath: o.storePath,
    registered: (id) => host.manifest(id) !== undefined,
    register: (id) => host.register(id),
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
    log,
  });
}

/** Registers the store's models with the master, once per session and after each change. */
function registration(
  o: StoreHostComponentOptions,
  host: StoreHost,
  st: HostState,
): () => Promise<void> {
  const { log, cluster } = o;
  let registeredFor: string | null = null;
  return async () => {
    const due = `${cluster.sessionId}/${st.version}`;
    if (!cluster.synced || registeredFor === due) return;
    await host.registerAll();
    const ids: string[] = [];
    for (const manifest of host.models()) {
      const dir = host.modelPath(manifest.model_id);
      const rec = await readModelDir(dirname(dir), basename(dir), log);
      if (!rec) continue;
      await cluster.command({
        type: "RegisterModel",
        model: {
          ...rec,
          bytes: manifest.total_bytes,
          registered_by: cluster.nodeId!,
          store_url: o.self.apiUrl,
        },
      });
      ids.push(rec.model_id);
    }
    registeredFor = due;
    log.info({ models: ids }, "registered store models");
  };
}
