// Front door of the protocol package: every subject, schema, id and error code of the system.
export * from "./ids.ts";
export * from "./clock.ts";
export * from "./units.ts";
export * from "./random.ts";
export * from "./errors.ts";
export * from "./cluster.ts";
export * from "./intent.ts";
export * from "./telemetry.ts";
export * from "./subjects.ts";
export * from "./store.ts";
export * from "./state-document.ts";
export * from "./observability.ts";
export type * from "./chat-events.ts";
export * from "./http-api.ts";
export * from "./openapi.ts";
export * from "./peer-api.ts";
export type * from "./cluster-view.ts";
