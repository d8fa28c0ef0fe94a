// Wires the publisher's components and serves them on 127.0.0.1 only.
// Lifecycle: start() once, stop() idempotent (cancels running jobs, closes connections).
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Hono } from "hono";
import type { Logger } from "@ic/log";
import { createPublisherApp } from "./app.ts";
import { Catalog } from "./catalog.ts";
import { systemClock } from "@ic/protocol";
import type { Clock } from "@ic/protocol";
import type { PublisherConfig } from "./config.ts";
import { PUBLIC_DIR } from "./config.ts";
import { Detector } from "./detector.ts";
import { errorMessage } from "./errors.ts";
import { listenHttp } from "./http-server.ts";
import { createHubClient, displayHubUrl } from "./hub-client.ts";
import type { HubClient } from "./hub-client.ts";
import { JobManager } from "./jobs.ts";
import { runPublish } from "./publish.ts";
import { TokenStore } from "./token-store.ts";
import { scrubSecret } from "./errors.ts";

export const BIND_HOST = "127.0.0.1";

export interface PublisherServerOptions {
  readonly config: PublisherConfig;
  /**
   * Makes the server's root logger; it must pass every line through `scrub`, which removes the hub
   * token the server holds (createLogger's `scrub` option).
   */
  readonly log: (scrub: (line: string) => string) => Logger;
  /** HF_TOKEN from the environment. */
  readonly envToken?: string | undefined;
  readonly clock?: Clock;
  /** Replaces the hub client built from the config (e.g. with a custom fetch). */
  readonly hub?: HubClient;
  readonly publicDir?: string;
}

export class PublisherServer {
  readonly tokens: TokenStore;
  readonly jobs: JobManager;
  readonly catalog: Catalog;
  readonly app: Hono;
  private server: Server | null = null;
  private stopped: Promise<void> | null = null;
  private readonly log: Logger;
  private address = "";

  constructor(private readonly o: PublisherServerOptions) {
    // The token store logs while it loads: until it exists there is no token to scrub.
    const root = o.log((line) => scrubSecret(line, (this.tokens as TokenStore | undefined)?.get()));
    this.log = root.child({ component: "publisher" });
    const c = o.config;
    this.tokens = new TokenStore({ configDir: c.configDir, envToken: o.envToken, log: root });
    const hub = o.hub ?? createHubClient({ hubUrl: c.hubUrl, token: () => this.tokens.get() });
    this.jobs = new JobManager({
      clock: o.clock ?? systemClock,
      log: root,
      retentionMs: c.retentionMs,
      maxRunning: c.maxJobs,
      secret: () => this.tokens.get(),
    });
    this.catalog = new Catalog({ path: c.catalogPath, log: root });
    this.app = createPublisherApp({
      tokens: this.tokens,
      detector: new Detector({ hub, log: root }),
      jobs: this.jobs,
      catalog: this.catalog,
      runPublish: (req, ctx) => runPublish(req, ctx, { hub, workDir: c.workDir }),
      publicDir: o.publicDir ?? PUBLIC_DIR,
      log: root,
      hubUrl: c.hubUrl,
    });
  }

  /** The server's logger (its lines are scrubbed of the hub token). */
  get logger(): Logger {
    return this.log;
  }

  get url(): string {
    return this.address;
  }

  async start(): Promise<string> {
    if (this.server) return this.address;
    await this.tokens.load();
    try {
      const n = (await this.catalog.load()).length;
      this.log.info({ catalog: this.catalog.path, entries: n }, "catalog loaded");
    } catch (err) {
      this.log.error(
        { catalog: this.catalog.path, err: errorMessage(err) },
        "catalog failed to load; lookups will fail until it is fixed",
      );
    }
    const server = await listenHttp(this.app, {
      host: BIND_HOST,
      port: this.o.config.port,
      log: this.log,
    });
    this.server = server;
    this.address = `http://${BIND_HOST}:${(server.address() as AddressInfo).port}`;
    this.log.info(
      { url: this.address, hub: displayHubUrl(this.o.config.hubUrl) },
      "weights publisher listening",
    );
    return this.address;
  }

  stop(): Promise<void> {
    this.stopped ??= (async () => {
      await this.jobs.stop();
      const server = this.server;
      if (server) {
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        });
      }
      this.log.info("weights publisher stopped");
    })();
    return this.stopped;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.stop();
  }
}
