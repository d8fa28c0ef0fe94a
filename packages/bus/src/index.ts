// Front door of the bus package: the nats-server supervisor and the typed client.
export { NatsServer, parseAuthFailure } from "./nats-server.ts";
export type {
  AuthFailure,
  Credentials,
  NatsServerOptions,
  NatsServerState,
} from "./nats-server.ts";
export { Bus } from "./bus.ts";
export type { BusSendStats, MessageMeta, SendOp, Unsubscribe } from "./bus.ts";
export { INTENT_BUCKET, JetStreamIntentStore } from "./intent-store.ts";
export type { IntentStoreOptions } from "./intent-store.ts";
