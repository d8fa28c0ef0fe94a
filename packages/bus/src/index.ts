// Front door of the bus package: the nats-server supervisor and the typed client.
export { NatsServer } from "./nats-server.ts";
export type { NatsServerOptions, NatsServerState } from "./nats-server.ts";
export { Bus } from "./bus.ts";
export type { Unsubscribe } from "./bus.ts";
